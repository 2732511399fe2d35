"""Benchmarks, the soak and one-off measurements: run from a checkout with
``python -m bench.<name>``; not installed."""
