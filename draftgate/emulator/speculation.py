"""Speculation simulated position by position, so acceptance emerges.

Each output position gets a target distribution over a slice of the
vocabulary whose entropy depends on the token's kind (JSON syntax, an enum
value, a copied value, free text, prose, code ...) and drifts along the
sequence (AR(1) on log-entropy: predictability is correlated, as in real text).
A model drafter's logits are the target's plus noise whose size is the
drafter's misalignment. Draft tokens are accepted by the standard rule: at
temperature 0 when the draft's argmax is the target's; above it (greedy
drafts) with the target's tempered probability of the draft token. A lookup
drafter (ngram, suffix) works on the token sequences alone (``lookup.py``).
Nothing here knows the Draft Law.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from draftgate.emulator.profile import EngineProfile

_R_GRID = np.linspace(1e-6, 0.999, 4000)


def _entropy_table(candidates: int) -> np.ndarray:
    """Entropy of p_j ~ r**j over ``candidates`` slots, for each r on the grid."""
    j = np.arange(candidates)
    logits = np.outer(np.log(_R_GRID), j)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return -(p * np.log(np.maximum(p, 1e-300))).sum(axis=1)


_TABLES: dict[int, np.ndarray] = {}


@dataclass
class PositionModel:
    """Per-position facts of one output sequence, fixed when it is admitted."""

    target_logprobs: np.ndarray  # (N, K) log-probabilities; index 0 is the target's argmax
    accept_greedy: np.ndarray  # (N,) bool: draft argmax equals target argmax
    accept_prob_sampled: np.ndarray  # (N,) target's tempered probability of the draft token
    uniforms: np.ndarray  # (N,) draws that decide sampled acceptance
    # A lookup drafter, for a round starting at each position: how many tokens it proposes,
    # and how many of them are the tokens the target emits (``lookup.runs_from_each_position``)
    proposed: np.ndarray  # (N,) int
    matching: np.ndarray  # (N,) int
    top_prob_sampled: np.ndarray  # (N,) target's tempered probability of its own top token

    _runs: dict[tuple[bool, bool], list[int]] = field(default_factory=dict, repr=False)
    _proposed: list[int] | None = field(default=None, repr=False)

    def accepts_copy(self, position: int, temperature: float) -> bool:
        """A copied token that is the target's top token: always accepted at temperature 0;
        above it, with the target's probability of it (a lookup's draft is one token, certain)."""
        return temperature <= 1e-5 or bool(self.uniforms[position] < self.top_prob_sampled[position])

    def accepts(self, position: int, temperature: float) -> bool:
        if temperature <= 1e-5:
            return bool(self.accept_greedy[position])
        return bool(self.uniforms[position] < self.accept_prob_sampled[position])

    def accepted(self, start: int, draft_len: int, temperature: float, copy: bool) -> int:
        """Draft tokens accepted in a round starting at ``start``: the run of positions from there
        that ``accepts`` (``accepts_copy`` for a lookup, which also stops where its copy stops
        matching), up to ``draft_len``."""
        greedy = temperature <= 1e-5
        runs = self._runs.get((copy, greedy))
        if runs is None:
            if copy:
                ok = np.ones(len(self.uniforms), dtype=bool) if greedy else self.uniforms < self.top_prob_sampled
            else:
                ok = self.accept_greedy if greedy else self.uniforms < self.accept_prob_sampled
            runs = self._runs[(copy, greedy)] = _runs_of(ok)
        if copy:
            return min(draft_len, runs[start], int(self.matching[start]))
        return min(draft_len, runs[start])

    def proposed_at(self, start: int) -> int:
        """Tokens a lookup drafter proposes for a round starting at ``start``."""
        if self._proposed is None:
            self._proposed = self.proposed.tolist()
        return self._proposed[start]

    def entropy(self, position: int) -> float:
        lp = self.target_logprobs[position]
        return float(-(np.exp(lp) * lp).sum())


def _runs_of(ok: np.ndarray) -> list[int]:
    """For each position, how many positions in a row from it are ``ok``."""
    n = len(ok)
    failures = np.where(ok, n, np.arange(n))
    next_failure = np.minimum.accumulate(failures[::-1])[::-1] if n else failures
    return (next_failure - np.arange(n)).tolist()


def position_model(
    kinds: list[str], profile: EngineProfile, temperature: float, rng: np.random.Generator, misalignment: float,
    lookups: tuple[list[int], list[int]] | None = None,
) -> PositionModel:
    """Draw the target and draft distributions for a sequence of output token kinds."""
    n, k = len(kinds), profile.candidates
    table = _TABLES.get(k)
    if table is None:
        table = _TABLES[k] = _entropy_table(k)
    means = np.log(np.maximum([profile.entropy.get(kind, profile.entropy["prose"]) for kind in kinds], 1e-4))
    noise = rng.standard_normal(n) * profile.entropy_spread
    # AR(1) along the sequence, scaled to keep the marginal spread as configured
    phi = profile.entropy_correlation
    drift = np.empty(n)
    level = 0.0
    scale = np.sqrt(1 - phi * phi)
    for i in range(n):
        level = phi * level + scale * noise[i]
        drift[i] = level
    entropy = np.minimum(np.exp(means + drift), table[-1] * 0.999)
    r = np.interp(entropy, table, _R_GRID)
    j = np.arange(k)
    logits = np.outer(np.log(r), j)
    logprobs = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    draft = logits + rng.standard_normal((n, k)) * misalignment
    draft_top = draft.argmax(axis=1)
    greedy = draft_top == 0
    if temperature > 1e-5:
        tempered = logprobs / temperature
        tempered = tempered - np.log(np.exp(tempered).sum(axis=1, keepdims=True))
        sampled = np.exp(tempered[np.arange(n), draft_top])
        top = np.exp(tempered[:, 0])
    else:
        sampled = greedy.astype(float)
        top = np.ones(n)
    proposed, matching = (np.asarray(lookups[0], dtype=int), np.asarray(lookups[1], dtype=int)) if lookups else (
        np.zeros(n, dtype=int), np.zeros(n, dtype=int))
    return PositionModel(logprobs, greedy, sampled, rng.random(n), proposed, matching, top)
