"""A fleet in virtual time: every replica's engine and the proxy's own planner on one simulated clock.

Nothing here waits for wall time. Events (a request arriving, a replica's step
ending, the proxy scraping its replicas) are taken in time order from one
queue, ties in the order they were made, so the same seed gives the same run
on any machine, whatever else it is doing.

The proxy's side is the proxy's own code: its ``PoolSet`` and ``Replica``
bookkeeping (in-flight counts, what the last scrape read), its ``Planner``
(estimate, learner, affinity, the gate's decision) and its replica choice
(``Pool.pick_replica``). The planner learns a pool's load only as the proxy
does: from its own in-flight counts and from a scrape every
``health.scrape_interval``, never from the engines' internals. A homogeneous fleet is
the same proxy with one pool: its balancer (least loaded, a conversation kept
on the replica that holds its prefix) is the gate's.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from draftgate.emulator.engine import Engine, Sequence, Step
from draftgate.emulator.lookup import AnswerCache
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.requests import Bank, Prepared
from draftgate.policy.calibration import Calibration
from draftgate.proxy.affinity import Conversation
from draftgate.proxy.config import ProxySettings
from draftgate.proxy.fleet_planning import FIRST_PLAN_SECONDS
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.planner import Planner, Reading, RequestPlan
from draftgate.proxy.pools import Pool, PoolSet, Replica


@dataclass
class Served:
    """What one request saw, in simulated seconds from its arrival at the proxy."""

    key: str
    workload: str
    arrived: float
    measured: bool  # inside the measurement window
    pool: str = ""
    tokens: int = 0
    gpu_seconds: float = 0.0
    first_token: float | None = None
    last_token: float | None = None
    shed: bool = False  # refused: every pool stayed full for the proxy's queue timeout
    finished: bool = False

    @property
    def over(self) -> bool:
        """Answered, or refused."""
        return self.finished or self.shed

    @property
    def ttft(self) -> float:
        return float("inf") if self.first_token is None else self.first_token - self.arrived

    @property
    def tpot(self) -> float:
        if self.first_token is None or self.last_token is None:
            return float("inf")
        return (self.last_token - self.first_token) / max(1, self.tokens - 1)

    @property
    def e2e(self) -> float:
        return float("inf") if not self.finished or self.last_token is None else self.last_token - self.arrived


@dataclass
class Job:
    """A request on its way through the proxy."""

    request: Prepared
    body: dict[str, Any]
    served: Served
    then: Callable[[float], None] | None  # what its answer sets off (a session's next turn)
    plan: RequestPlan | None = None
    replica: Replica | None = None
    waited_since: float | None = None


class Arrivals(Protocol):
    """What arrives, and when: started once (it sends and schedules its arrivals through the simulation),
    then asked after every event whether it is done."""

    def start(self, sim: Simulation) -> None: ...

    def done(self, sim: Simulation) -> bool: ...


@dataclass
class Window:
    """The fleet's busy GPU-seconds and output tokens over the measurement window."""

    start: float
    end: float
    busy_seconds: float = 0.0
    tokens: int = 0


@dataclass
class Run:
    served: list[Served]
    window: Window
    gpus: int
    ended_at: float


class _Replica:
    """One GPU of the fleet: its engine and the proxy's record of it."""

    __slots__ = ("spec", "proxy", "engine", "stepping", "step_ends", "answers")
    engine: Engine  # made once the replica is, to tell it what it does

    def __init__(self, spec: PoolSpec, proxy: Replica) -> None:
        self.spec = spec
        self.proxy = proxy
        self.stepping = False
        self.step_ends = 0.0  # of the step it runs, when it runs one
        # suffix decoding copies from the answers this replica gave before, as a vLLM server does
        self.answers = AnswerCache() if spec.speculative and spec.method == "suffix" else None


class _Told:
    """What an engine tells the simulation: only that a sequence finished."""

    __slots__ = ("sim", "replica")

    def __init__(self, sim: Simulation, replica: _Replica) -> None:
        self.sim = sim
        self.replica = replica

    def admitted(self, seq: Sequence) -> None:
        pass

    def round(self, seq: Sequence, start: int, draft_len: int, accepted: int) -> None:
        pass

    def tokens(self, seq: Sequence, start: int, end: int) -> None:
        pass

    def finished(self, seq: Sequence) -> None:
        self.sim.answered(self.replica, seq)


def proxy_settings(fleet: Fleet, max_num_seqs: int, extra: dict[str, Any] | None = None) -> ProxySettings:
    """The proxy's configuration in front of ``fleet``: a replica URL per GPU."""
    pools = [p.proxy_pool([replica_url(p, i) for i in range(p.gpus)], max_num_seqs) for p in fleet.pools]
    return ProxySettings(pools=pools, log_requests=False, **(extra or {}))


def replica_url(pool: PoolSpec, index: int) -> str:
    return f"http://{pool.name}-{index}.sim:8000"


class Simulation:
    """One run of a fleet, from empty: its replicas, the proxy in front, and one clock."""

    def __init__(self, fleet: Fleet, bank: Bank, settings: ProxySettings, calibration: Calibration, seed: int,
                 max_num_seqs: int) -> None:
        self.fleet = fleet
        self.bank = bank
        self.settings = settings
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[Any], None], Any]] = []
        self._order = itertools.count()
        self.pools = PoolSet(settings.pools, settings.queue_depth_per_replica)
        self.planner = Planner(settings, self.pools, ProxyMetrics(), calibration=calibration, seed=seed,
                               clock=lambda: self.now)
        self.replicas: dict[str, _Replica] = {}
        for spec in fleet.pools:
            proxy_pool = self.pools.pools[spec.name]
            for i in range(spec.gpus):
                url = replica_url(spec, i)
                replica = _Replica(spec, proxy_pool.replicas[url])
                replica.engine = Engine(bank.profile, spec.speculative_config(), max_num_seqs,
                                        observer=_Told(self, replica))
                self.replicas[url] = replica
        self._jobs: dict[Sequence, Job] = {}
        self._waiting: list[Job] = []  # for room at the proxy
        self.served: list[Served] = []
        self._salts = itertools.count()
        self.window: Window | None = None
        self._window_marks: dict[str, tuple[float, int]] = {}
        # told of every answer with the sequence behind it, for whoever reads more than latencies
        self.on_answer: Callable[[Served, Sequence, Prepared], None] | None = None

    # ------------------------------------------------------------ the clock

    def at(self, when: float, action: Callable[[Any], None], argument: Any = None) -> None:
        heapq.heappush(self._queue, (when, next(self._order), action, argument))

    def run(self, traffic: Arrivals, window: tuple[float, float], limit: float) -> Run:
        """Run ``traffic`` until it is done or the clock reaches ``limit``; busy time and tokens are
        counted over ``window``."""
        self.window = Window(*window)
        traffic.start(self)
        self.at(0.0, self._scrape)
        self.at(self.settings.plan.assignment_interval, self._refresh)
        if self.settings.plan.interval > 0:
            self.at(min(FIRST_PLAN_SECONDS, self.settings.plan.interval), self._replan)
        self.at(window[0], self._mark, "start")
        self.at(window[1], self._mark, "end")
        while self._queue and not traffic.done(self):
            when, _, action, argument = heapq.heappop(self._queue)
            if when > limit:
                break
            self.now = when
            action(argument)
        if "end" not in self._window_marks:
            self._mark("end")
        return Run(self.served, self.window, self.fleet.gpus, self.now)

    def _mark(self, which: str) -> None:
        # an engine counts a step's time when it starts it: less what is still to run of the one running now
        busy = sum(r.engine.busy_seconds - (max(0.0, r.step_ends - self.now) if r.stepping else 0.0)
                   for r in self.replicas.values())
        tokens = sum(r.engine.generated_tokens for r in self.replicas.values())
        self._window_marks[which] = (busy, tokens)
        if which == "end" and self.window is not None:
            start = self._window_marks.get("start", (0.0, 0))
            self.window.busy_seconds, self.window.tokens = busy - start[0], tokens - start[1]

    # ------------------------------------------------------------ requests

    def send(self, request: Prepared, measured: bool, salt: str | None = None,
             then: Callable[[float], None] | None = None) -> Served:
        """``request`` arrives at the proxy now; ``salt`` keys its prefix cache (a session's turns share
        one), ``then`` is called with the time its answer ends."""
        salt = salt if salt is not None else f"arrival-{next(self._salts)}"
        body = dict(request.body, cache_salt=salt)
        served = Served(request.key, request.workload, self.now, measured)
        self.served.append(served)
        self._dispatch(Job(request, body, served, then))
        return served

    def new_salt(self) -> str:
        return f"arrival-{next(self._salts)}"

    def _dispatch(self, job: Job) -> None:
        request = job.request
        if job.plan is None:
            if request.prior is None:
                reading = self.planner.read(request.body, "chat")
                request.prior, request.shape = reading.prior, reading.shape
            reading = Reading(request.prior, request.shape, Conversation.of(job.body))
            job.plan = self.planner.plan(job.body, "chat", reading=reading)
        plan = job.plan
        order: list[Pool] = [p for name in plan.order if (p := self.pools.pools.get(name)) is not None]
        pool = self.pools.first_with_room(order)
        if pool is None:
            if job.waited_since is None:
                job.waited_since = self.now
                self.at(self.now + self.settings.timeouts.queue, self._give_up, job)
            self._waiting.append(job)
            return
        match = plan.affinity
        prefer = match.placement.replica if match is not None and match.placement.pool == pool.name else None
        chosen = pool.pick_replica(prefer, kv_cache_full=self.settings.kv_cache_full)
        assert chosen is not None  # every replica of a simulated pool is in rotation
        replica = self.replicas[chosen.url]
        chosen.start()
        job.replica = chosen
        job.served.pool = pool.name
        seq = self.bank.sequence(request, replica.spec, job.body["cache_salt"], replica.answers)
        self._jobs[seq] = job
        replica.engine.submit(seq, self.now)
        if not replica.stepping:
            self._step(replica)

    def _give_up(self, job: Job) -> None:
        if job in self._waiting:
            self._waiting.remove(job)
            job.served.shed = True
            if job.then is not None:
                job.then(self.now)

    def answered(self, replica: _Replica, seq: Sequence) -> None:
        """``seq`` finished on ``replica``: the proxy records what it taught and releases the replica."""
        job = self._jobs.pop(seq)
        served = job.served
        served.tokens, served.gpu_seconds = seq.emitted, seq.gpu_seconds
        served.first_token, served.last_token, served.finished = seq.first_token_sim, seq.last_token_sim, True
        plan = job.plan
        assert plan is not None and job.replica is not None
        priors = self.settings.structure_priors
        measured = self.bank.observed(job.request, seq, priors.legacy_guided_fields_honoured,
                                      plan.estimate.reasoning_hidden)
        self.planner.learn(plan, measured, replica.spec.name, job.replica.url, float(len(job.request.prompt.tokens)))
        self.pools.release(job.replica)
        if self.on_answer is not None:
            self.on_answer(served, seq, job.request)
        if job.then is not None:
            job.then(self.now)
        if self._waiting:
            waiting, self._waiting = self._waiting, []
            for other in waiting:
                self._dispatch(other)

    # ------------------------------------------------------------ the replicas

    def _step(self, replica: _Replica) -> None:
        step = replica.engine.step()
        replica.stepping = step is not None
        if step is not None:
            replica.step_ends = self.now + step.seconds
            self.at(replica.step_ends, self._step_ended, (replica, step))

    def _step_ended(self, argument: tuple[_Replica, Step]) -> None:
        replica, step = argument
        replica.engine.finish(step, self.now)
        self._step(replica)

    def _refresh(self, _: Any = None) -> None:
        """The proxy's assignment, spilled as the kinds' rates need it, every ``plan.assignment_interval``."""
        self.planner.refresh()
        self.at(self.now + self.settings.plan.assignment_interval, self._refresh)

    def _replan(self, _: Any = None) -> None:
        """The proxy's fleet plan from its own traffic, every ``plan_interval``: the assignment it routes by
        (the fleet it would recommend is for the operator's eyes, and changes no route)."""
        self.planner.replan(recommend=False)
        self.at(self.now + self.settings.plan.interval, self._replan)

    def _scrape(self, _: Any = None) -> None:
        """What the proxy's monitor reads of every replica, all at once (a scrape takes no time here)."""
        for replica in self.replicas.values():
            engine = replica.engine
            replica.proxy.took_scrape({"running": float(len(engine.running)), "waiting": float(len(engine.waiting)),
                                       "kv_usage": engine.kv_usage}, replica.proxy.finished_since_scrape, self.now)
        self.at(self.now + self.settings.health.scrape_interval, self._scrape)
