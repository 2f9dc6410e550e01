"""What the trainer trains: the workload contract, the built-in model and corpus, a user's
Hugging Face model and dataset, and how samples make an optimizer step."""
