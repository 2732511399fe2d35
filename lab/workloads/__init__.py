"""Workload data (committed) and the loaders for it."""
