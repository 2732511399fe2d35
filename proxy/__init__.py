"""The draftgate service: an OpenAI-compatible proxy that gates speculative decoding."""

__version__ = "0.1.0"
