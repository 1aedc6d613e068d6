"""Optimizers (config group `optimizer`)."""
