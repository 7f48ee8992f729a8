"""Environments for the tuned examples and the studies that RLlib cannot make from a name alone."""
