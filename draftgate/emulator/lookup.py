"""Copy-based drafters as vLLM runs them: what they propose, and what of it is accepted.

A lookup drafter proposes only what already appeared. vLLM's ``ngram`` proposer
(``vllm/v1/spec_decode/ngram_proposer.py``) takes the longest suffix of the
context, between ``prompt_lookup_min`` and ``prompt_lookup_max`` tokens, that
occurred earlier in the prompt or the output so far, and proposes the ``k``
tokens that followed its earliest occurrence. ``suffix`` decoding also looks in
the answers the server gave before, and proposes fewer tokens after a short match.

At temperature 0 a drafted token is accepted if and only if it is the token the
target emits next, so given the token sequences every round's accepted length
follows from them alone (``replay``). The emulator and ``draftgate measure-ngram``
both use this module; the gate never does: it predicts copying from a request's
structure (``draftgate.policy.copying``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# vLLM's defaults when a speculative config names neither bound
DEFAULT_LOOKUP_MIN = 5
DEFAULT_LOOKUP_MAX = 5
# suffix decoding's defaults (vLLM SpeculativeConfig): the tree depth bounds match plus
# speculation; speculation is at most the factor times the match
SUFFIX_TREE_DEPTH = 24
SUFFIX_SPEC_FACTOR = 1.0
# The emulator's suffix drafter keeps this many earlier answers and matches suffixes up to
# this long: a bounded stand-in for vLLM's global suffix tree (10,000 requests).
SUFFIX_CACHED_ANSWERS = 256
SUFFIX_LONGEST_MATCH = 8


class Proposer(Protocol):
    """Proposes draft tokens from the context; told each token the sequence gains."""

    def propose(self, k: int) -> Sequence[Hashable]: ...

    def extend(self, tokens: Sequence[Hashable]) -> None: ...


class NgramProposer:
    """vLLM's prompt-lookup proposer over one sequence's context, indexed as it grows.

    For each length ``n`` in ``[lookup_min, lookup_max]`` the index holds where each
    n-gram first occurred; the longest suffix with an earlier occurrence wins, and at
    that length the earliest occurrence, as vLLM's KMP search chooses.
    """

    def __init__(self, prompt: Sequence[Hashable], lookup_min: int = DEFAULT_LOOKUP_MIN,
                 lookup_max: int = DEFAULT_LOOKUP_MAX) -> None:
        if not 1 <= lookup_min <= lookup_max:
            raise ValueError(f"need 1 <= lookup_min <= lookup_max, got {lookup_min}, {lookup_max}")
        self.lookup_min, self.lookup_max = lookup_min, lookup_max
        self.context: list[Hashable] = []
        self._first: dict[int, dict[tuple[Hashable, ...], int]] = {n: {} for n in range(lookup_min, lookup_max + 1)}
        self.extend(prompt)

    def extend(self, tokens: Sequence[Hashable]) -> None:
        context = self.context
        for token in tokens:
            context.append(token)
            end = len(context)
            for n, first in self._first.items():
                if end >= n:
                    first.setdefault(tuple(context[end - n:end]), end - n)

    def propose(self, k: int) -> Sequence[Hashable]:
        context = self.context
        end = len(context)
        for n in range(self.lookup_max, self.lookup_min - 1, -1):
            if end < n:
                continue
            start = self._first[n].get(tuple(context[end - n:end]))
            if start is not None and start < end - n:  # an occurrence before the suffix itself
                return context[start + n:start + n + k]
        return ()


@dataclass
class AnswerCache:
    """The answers a suffix-decoding server gave before, shared by its requests, each with the request it
    answered (``source``: any key that tells requests apart, 0 for one that need not be)."""

    size: int = SUFFIX_CACHED_ANSWERS
    longest: int = SUFFIX_LONGEST_MATCH
    _answers: deque[tuple[Hashable, ...]] = field(default_factory=deque)
    _sources: deque[int] = field(default_factory=deque)
    _latest: dict[tuple[Hashable, ...], tuple[int, int]] = field(default_factory=dict)
    _serial: int = 0
    _evicted: int = 0  # answers evicted since the index last dropped what pointed into them

    def add(self, answer: Sequence[Hashable], source: int = 0) -> None:
        tokens = tuple(answer)
        if not tokens or self.size <= 0:
            return
        self._answers.append(tokens)
        self._sources.append(source)
        self._serial += 1
        if len(self._answers) > self.size:
            self._answers.popleft()
            self._sources.popleft()
            self._evicted += 1
        serial = self._serial
        # each n-gram of up to ``longest`` tokens with a token after it, its latest occurrence winning; one
        # comprehension a length rather than a loop a token: a suffix server adds every answer it gives
        ends = [(serial, end) for end in range(len(tokens))]
        for n in range(1, min(self.longest, len(tokens) - 1) + 1):
            self._latest.update({tokens[end - n:end]: ends[end] for end in range(n, len(tokens))})
        # drop what points into evicted answers once as many were evicted as are kept: the index stays within
        # twice the live answers', and is rebuilt once every ``size`` answers rather than on every one
        if self._evicted >= self.size:
            oldest = serial - len(self._answers) + 1
            self._latest = {key: at for key, at in self._latest.items() if at[0] >= oldest}
            self._evicted = 0

    def indexed(self, tail: tuple[Hashable, ...]) -> int:
        """How many of ``tail``'s last tokens are indexed together (``longest_indexed``)."""
        return longest_indexed(self._latest, tail)

    def continuation(self, suffix: tuple[Hashable, ...], k: int, exclude: int | None = None) -> tuple[Hashable, ...]:
        """Up to ``k`` tokens that followed ``suffix`` where it occurred last, unless that was in an answer
        to ``exclude`` (then none: the index holds only the latest occurrence)."""
        found = self._latest.get(suffix)
        if found is None:
            return ()
        serial, end = found
        index = len(self._answers) - 1 - (self._serial - serial)
        if index < 0 or (exclude is not None and self._sources[index] == exclude):
            return ()
        return self._answers[index][end:end + k]


class SuffixProposer:
    """Suffix decoding, bounded: the longest suffix (up to ``SUFFIX_LONGEST_MATCH`` tokens) found
    in this request's context or in earlier answers, continued from its latest occurrence;
    speculation at most ``SUFFIX_SPEC_FACTOR`` times the match and within the tree depth."""

    def __init__(self, prompt: Sequence[Hashable], cache: AnswerCache | None = None,
                 exclude: int | None = None) -> None:
        self.cache = cache
        self.exclude = exclude  # the request whose earlier answers in ``cache`` are not copied
        self.context: list[Hashable] = []
        self._latest: dict[tuple[Hashable, ...], int] = {}
        self.extend(prompt)

    def extend(self, tokens: Sequence[Hashable]) -> None:
        context, latest = self.context, self._latest
        for token in tokens:
            # index the n-grams ending just before this token, so the newest suffix never matches itself
            end = len(context)
            tail = tuple(context[-SUFFIX_LONGEST_MATCH:])
            for start in range(len(tail)):
                latest[tail[start:]] = end
            context.append(token)

    def own_match(self) -> tuple[int, int]:
        """The longest suffix of the context that occurred earlier in it: its length, and where its
        latest occurrence ends (0, 0: none)."""
        tail = tuple(self.context[-SUFFIX_LONGEST_MATCH:])
        here = longest_indexed(self._latest, tail)
        return here, self._latest[tail[len(tail) - here:]] if here else 0

    def propose(self, k: int) -> Sequence[Hashable]:
        here, end = self.own_match()
        return _suffix_draft(self.context, len(self.context), here, end, k, self.cache, self.exclude)


@dataclass(frozen=True)
class OwnMatches:
    """What suffix decoding finds in a request's own context at each output position
    (``SuffixProposer.own_match``). No other request's answer changes it, so a simulation works it out
    once a request, and only the answer cache is read again on each replica (``suffix_runs``)."""

    lengths: tuple[int, ...]
    ends: tuple[int, ...]

    @classmethod
    def of(cls, prompt: Sequence[Hashable], output: Sequence[Hashable]) -> OwnMatches:
        proposer = SuffixProposer(prompt)
        found = []
        for token in output:
            found.append(proposer.own_match())
            proposer.extend((token,))
        return cls(tuple(here for here, _ in found), tuple(end for _, end in found))


def _suffix_draft(context: Sequence[Hashable], length: int, here: int, end: int, k: int,
                  cache: AnswerCache | None, exclude: int | None = None) -> Sequence[Hashable]:
    """The continuation of the longest suffix of ``context[:length]`` found in it (``here`` tokens long,
    its latest occurrence ending at ``end``) or in ``cache``, the context first at a length.

    An n-gram is indexed only with every shorter suffix of it, in the context and in the cache, so the
    suffixes each holds are those up to some length: counted up from one token rather than tried from
    the longest down (most positions match a token or two)."""
    if k <= 0:
        return ()
    tail = tuple(context[max(0, length - SUFFIX_LONGEST_MATCH):length])
    there = cache.indexed(tail) if cache is not None else 0
    for n in range(max(here, there), 0, -1):
        limit = min(k, int(SUFFIX_SPEC_FACTOR * n), SUFFIX_TREE_DEPTH - n)
        if n <= here:  # the first length the context holds is ``here`` itself (``limit`` > 0 at any)
            return context[end:min(end + limit, length)]
        if cache is not None and (found := cache.continuation(tail[len(tail) - n:], limit, exclude)):
            return found
    return ()


def suffix_runs(prompt: Sequence[Hashable], output: Sequence[Hashable], k: int, own: OwnMatches,
                cache: AnswerCache | None, exclude: int | None = None) -> tuple[list[int], list[int]]:
    """``runs_from_each_position`` for a suffix drafter over ``cache``, with the request's ``own``
    matches worked out before; nothing copied from an answer to ``exclude`` (``AnswerCache.continuation``)."""
    context = [*prompt, *output]
    start = len(prompt)
    proposed, matching = [], []
    for i in range(len(output)):
        draft = _suffix_draft(context, start + i, own.lengths[i], own.ends[i], k, cache, exclude)
        proposed.append(len(draft))
        matching.append(_matched(draft, output, i))
    return proposed, matching


def _matched(draft: Sequence[Hashable], output: Sequence[Hashable], at: int) -> int:
    """How many of ``draft``'s tokens match ``output`` from position ``at`` on, in a row."""
    run = 0
    while run < len(draft) and at + run < len(output) and draft[run] == output[at + run]:
        run += 1
    return run


def longest_indexed(index: Mapping[tuple[Hashable, ...], object], tail: tuple[Hashable, ...]) -> int:
    """The most of ``tail``'s last tokens that ``index`` holds as one key, where it holds every shorter
    suffix of each key it holds."""
    n, top = 0, len(tail)
    while n < top and tail[top - n - 1:] in index:
        n += 1
    return n


@dataclass(frozen=True)
class Replay:
    """One answer decoded with a lookup drafter: the accepted length of every round, and
    which output positions were accepted draft tokens."""

    rounds: tuple[int, ...]
    accepted: tuple[bool, ...]
    drafted: int = 0  # draft tokens proposed over all rounds: what verification pays for

    @property
    def tau(self) -> float:
        """Accepted tokens per decoding round, rounds without a proposal counted: the
        figure that sets how many steps an answer takes (``tokens / (tau + 1)``)."""
        return sum(self.rounds) / len(self.rounds) if self.rounds else 0.0


def replay(proposer: Proposer, output: Sequence[Hashable], k: int) -> Replay:
    """Decode ``output`` round by round at temperature 0: each round the proposer drafts up to
    ``k`` tokens, the longest prefix equal to the output is accepted, and the target adds one."""
    rounds: list[int] = []
    accepted = [False] * len(output)
    drafted = 0
    i = 0
    while i < len(output):
        draft = proposer.propose(k) if k > 0 else ()
        drafted += len(draft)
        run = _matched(draft, output, i)
        accepted[i:i + run] = [True] * run
        step = min(run + 1, len(output) - i)
        proposer.extend(output[i:i + step])
        rounds.append(run)
        i += step
    return Replay(tuple(rounds), tuple(accepted), drafted)


def runs_from_each_position(proposer: Proposer, output: Sequence[Hashable], k: int) -> tuple[list[int], list[int]]:
    """For every position a round could start at: how many tokens the drafter proposes there,
    and how many of them match the output. A round's draft depends only on the context, which
    is the same whatever rounds came before, so the engine can decode with any depth up to ``k``."""
    proposed, matching = [], []
    for i in range(len(output)):
        draft = proposer.propose(k)
        proposed.append(len(draft))
        matching.append(_matched(draft, output, i))
        proposer.extend(output[i:i + 1])
    return proposed, matching
