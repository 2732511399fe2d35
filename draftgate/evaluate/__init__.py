"""The verdict: the gate against every fixed strategy and the oracle, on a bench whose truth it cannot see."""
