"""``draftgate simulate``: one emulated vLLM pool under a ladder of Poisson arrival rates, in virtual time."""
