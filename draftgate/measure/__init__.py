"""Exact measurements the gate's predictions are checked against (``draftgate measure-ngram``)."""
