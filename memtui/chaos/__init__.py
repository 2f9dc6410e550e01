"""Chaos for people: a kind's parameters as an operator types them, and its injections and
recoveries in words, shared by the console and the CLI."""
