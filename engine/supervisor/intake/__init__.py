"""What the trainer tells the run, taken in: its reports, what it spooled while no
supervisor heard it, saves nobody announced, the progress and health they add up to."""
