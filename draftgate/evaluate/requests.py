"""The evaluation's requests, each prepared once per seed and reused by every run.

A request's prompt, its answer and what the gate reads of it do not depend on
the rate it is replayed at or the fleet that serves it; what a drafter gets
right depends on the pool's drafting settings and nothing else. Preparing them
is most of what a request costs to simulate, so the bank keeps them for the
whole seed: every strategy at every rate replays the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draftgate.emulator import wire
from draftgate.emulator.app import EmulatorConfig
from draftgate.emulator.engine import Sequence
from draftgate.emulator.lookup import AnswerCache, OwnMatches
from draftgate.emulator.profile import EngineProfile
from draftgate.emulator.sequences import Answer, Prompt, SequenceMaker, Written, sequence
from draftgate.emulator.tokens import salted
from draftgate.evaluate.fleet import PoolSpec
from draftgate.policy.structure import ObservedStructure, StructureEstimate
from draftgate.proxy.observe import Observation
from draftgate.workloads.mix import MODEL, Item


@dataclass
class Prepared:
    """One request of an item: what it is, and what is known of it once and for all."""

    key: str  # the item's id and the request's turn
    workload: str
    body: dict[str, Any]
    prompt: Prompt
    prior: StructureEstimate | None = None  # what the gate reads of it, before any answer
    shape: str = ""
    observed: ObservedStructure | None = None  # what the proxy measures of its answer
    written: Written | None = None  # its answer's text, the same on every pool
    answers: dict[tuple[Any, ...], Answer] = field(default_factory=dict)  # by the pool's drafting settings
    own: OwnMatches | None = None  # what its own context offers suffix decoding (``Bank.answer``)


class Bank:
    """Requests prepared for one emulated profile and seed."""

    def __init__(self, profile: EngineProfile, seed: int) -> None:
        self.profile = profile
        self.seed = seed
        self._makers: dict[tuple[Any, ...], SequenceMaker] = {}
        self._prepared: dict[str, Prepared] = {}

    def requests_of(self, item: Item) -> list[Prepared]:
        return [self.prepared(f"{item.id}#{turn}", item.workload, body) for turn, body in enumerate(item.requests)]

    def prepared(self, key: str, workload: str, body: dict[str, Any]) -> Prepared:
        found = self._prepared.get(key)
        if found is None:
            found = self._prepared[key] = Prepared(key, workload, body, self.maker(None).prompt(body, "chat"))
        return found

    def maker(self, pool: PoolSpec | None) -> SequenceMaker:
        """The sequence maker of a server drafting as ``pool`` does (None: a plain server)."""
        signature = pool.signature if pool is not None and pool.speculative else ()
        maker = self._makers.get(signature)
        if maker is None:
            spec = pool.speculative_config() if pool is not None else None
            maker = self._makers[signature] = SequenceMaker(EmulatorConfig(MODEL, self.profile, spec, seed=self.seed))
        return maker

    def answer(self, request: Prepared, pool: PoolSpec, answers: AnswerCache | None = None) -> Answer:
        """``request``'s answer as ``pool`` drafts it. Kept for the next run, except a suffix pool's: its
        drafts copy from ``answers``, what the replica serving it answered before, so they are drafted
        anew on each replica (a run's figures must not depend on what an earlier run in the process
        left in a cache). Never from this request's own earlier answer: each arrival is a new request,
        as its own prefix cache salt makes it one to the prefix cache (``Simulation.send``)."""
        if request.written is None:
            request.written = self.maker(None).written(request.body, "chat")[0]
        if answers is not None:
            if request.own is None:
                request.own = OwnMatches.of(request.prompt.tokens, [t.text for t in request.written.generated.tokens])
            return self.maker(pool).drafted(request.body, "chat", request.prompt, request.written, answers,
                                            request.own, fresh=True)
        signature = pool.signature if pool.speculative else ()
        found = request.answers.get(signature)
        if found is None:
            found = request.answers[signature] = self.maker(pool).drafted(request.body, "chat", request.prompt,
                                                                           request.written)
        return found

    def sequence(self, request: Prepared, pool: PoolSpec, salt: str, answers: AnswerCache | None = None
                 ) -> Sequence:
        """A fresh sequence of ``request`` for one of ``pool``'s servers, its cache blocks under ``salt``;
        ``answers``: that server's earlier answers, for a suffix pool (``answer``)."""
        return sequence(request.prompt, salted(request.prompt.hashes, salt), self.answer(request, pool, answers))

    def observed(self, request: Prepared, seq: Sequence, legacy_guided: bool, reasoning_hidden: bool
                 ) -> ObservedStructure:
        """What the proxy measures of the answer ``seq`` gave, read from the answer as vLLM sends it:
        the same on every pool (speculation is lossless)."""
        if request.observed is None:
            assert request.written is not None
            answer = wire.final_body("sim", MODEL, request.body, "chat", [seq], [request.written.generated],
                                     len(request.prompt.tokens), None)
            observation = Observation()
            observation.feed(answer)
            request.observed = observation.measured(request.body, legacy_guided_honoured=legacy_guided,
                                                    reasoning_hidden=reasoning_hidden)
        return request.observed
