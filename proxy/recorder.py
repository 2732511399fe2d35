"""Where a finished request leaves its traces: predicted against observed, the
learner, affinity, attribution windows, and one log line.

Observed tau comes from the response's per-request speculation metrics when
the pool provides them; otherwise from the pool's counters, attributed to
classes over scrape windows (sound only while this proxy sees all of the
pool's traffic; with several proxy replicas, use per-request metrics or run
the same regression in Prometheus over ``draftgate_output_tokens_total``).

Observed saving is measured: time per output token on the speculation pool
against the plain pool, same class and load band (streams: decode time after
the first token; other answers: the whole request's time per token; each
compared with its own kind), and the GPU-seconds and money counters and the
drift gauge are worked out from it. The law evaluated at the observed
acceptance is exported beside it as what it is, modelled
(``draftgate_modelled_net_cost_ratio``).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from draftgate.policy import law
from draftgate.policy.attribution import CounterAttribution
from draftgate.policy.calibration import LOOKUP_METHODS
from draftgate.policy.structure import ObservedStructure
from draftgate.policy.vllm_fields import streams
from draftgate.proxy.logs import RequestLog
from draftgate.proxy.metrics import ProxyMetrics
from draftgate.proxy.observe import Observation
from draftgate.proxy.planner import Planner, RequestPlan
from draftgate.proxy.pools import Pool, PoolSet, Replica
from draftgate.proxy.traffic_record import TrafficRecord

log = logging.getLogger("draftgate.recorder")

_MAX_WINDOW_SCRAPES = 10
LOAD_BANDS = ((1, "1"), (8, "2-8"), (32, "9-32"), (128, "33-128"), (10**9, "129+"))
BAND_POINTS = {"1": 1, "2-8": 4, "9-32": 16, "33-128": 64, "129+": 192}


def load_band(batch: float) -> str:
    return next(label for limit, label in LOAD_BANDS if batch <= limit)


@dataclass(slots=True)
class Outcome:
    """How one gated request ended: the one record that metrics, the log line and
    the learner are fed from. ``pool`` and ``replica``: where it was served, None
    when no pool took it."""

    plan: RequestPlan
    status: int
    observation: Observation
    overhead: float  # seconds the proxy spent on the request before and after the upstream's answer
    pool: Pool | None = None
    replica: Replica | None = None
    sent: dict[str, Any] | None = None  # the body as the client sent it (the plan's is the gate's chat view)


class Recorder:
    """Where finished requests are recorded, and the pools' counters attributed to classes."""

    def __init__(self, planner: Planner, pools: PoolSet, metrics: ProxyMetrics,
                 traffic: TrafficRecord | None = None) -> None:
        self.planner = planner
        self.pools = pools
        self.metrics = metrics
        self.traffic = traffic  # where answered requests are written for replay, when configured
        self.drift: dict[tuple[str, str], deque[float]] = defaultdict(
            lambda: deque(maxlen=planner.settings.drift_window))
        self.attribution: dict[str, CounterAttribution] = defaultdict(CounterAttribution)
        self.window_tokens: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self.last_accepted: dict[str, float] = {}
        self.window_age: dict[str, int] = {}
        # (speculative, class, band, streamed) -> EWMA seconds per output token
        self.tpot: dict[tuple[bool, str, str, bool], float] = {}
        self.started = time.time()
        self.told_no_usage: set[str] = set()  # pools whose streams came without usage, once told

    def warn_if_attribution_unsound(self) -> None:
        """At startup: tau attributed from a pool's counters is sound only while one proxy sees all its traffic."""
        settings = self.planner.settings
        blind = [p.name for p in settings.pools if p.speculation is not None and not p.per_request_metrics]
        if blind and settings.proxy_replicas > 1:
            log.warning(
                "pools %s give no per-request speculation metrics and %d proxies share them: per-class tau "
                "attributed from their counters by one proxy is unsound; run them with "
                "--per-request-spec-decode-metrics, or regress in Prometheus over draftgate_output_tokens_total",
                ", ".join(blind), settings.proxy_replicas)

    # ------------------------------------------------------------ per request

    def record(self, outcome: Outcome) -> None:
        plan, observation, status, pool, replica = (outcome.plan, outcome.observation, outcome.status, outcome.pool,
                                                    outcome.replica)
        settings, m = self.planner.settings, self.metrics
        route = pool.name if pool is not None else plan.route
        model = m.model_label(plan.model)
        m.requests.labels(model=model, route=route, status=str(status), endpoint=plan.endpoint,
                          key=plan.caller.label).inc()
        m.overhead.labels(endpoint=plan.endpoint).observe(outcome.overhead)
        measured = None
        tau_obs = saving_obs = None
        if status == 200 and observation.complete and pool is not None and replica is not None:
            measured = observation.measured(
                plan.body, legacy_guided_honoured=settings.structure_priors.legacy_guided_fields_honoured,
                reasoning_hidden=plan.estimate.reasoning_hidden)
            if measured.source == "characters":
                self._tell_no_usage(pool.name)
            if measured.total_tokens > 0 and plan.shape:  # a fallback plan has no shape to learn
                tau_obs, saving_obs = self._observe(plan, model, pool, replica, observation, measured)
            prompt_tokens = observation.prompt_tokens or plan.estimate.prompt_tokens
            self.planner.learn(plan, measured, pool.name, replica.url, float(prompt_tokens))
            tokens = m.request_tokens
            tokens.labels(model=model, kind=plan.kind, part="prompt").observe(float(prompt_tokens))
            tokens.labels(model=model, kind=plan.kind, part="output").observe(measured.total_tokens)
        if settings.log_requests and RequestLog.stream is not None:
            self._log(outcome, route, measured, tau_obs, saving_obs)
        if self.traffic is not None and status == 200 and outcome.sent is not None:
            self.traffic.write(plan, outcome.sent)

    def _tell_no_usage(self, pool: str) -> None:
        """Once per pool: a stream without usage is measured from its characters, roughly."""
        if pool in self.told_no_usage:
            return
        self.told_no_usage.add(pool)
        log.warning("pool %s streams without usage: start its vLLM with --enable-force-include-usage, or "
                    "streamed output is measured from characters, not tokens", pool)

    def _observe(self, plan: RequestPlan, model: str, pool: Pool, replica: Replica, observation: Observation,
                 measured: ObservedStructure) -> tuple[float | None, float | None]:
        """``model`` is the model's label value (ProxyMetrics.model_label)."""
        m = self.metrics
        calibration = self.planner.calibration
        kind = plan.kind
        labels = {"model": model, "pool": pool.name, "kind": kind}
        m.ws_predicted.labels(**labels).observe(plan.estimate.w_s)
        m.ws_observed.labels(**labels).observe(measured.w_s)
        for token_class, count in (("s", measured.tokens.s), ("r", measured.tokens.r), ("f", measured.tokens.f)):
            if count > 0:
                m.output_tokens.labels(model=model, pool=pool.name, token_class=token_class).inc(count)
        # The first token of every response comes from prefill, never from a draft:
        # leave it out of the attribution window (it belongs to the response's first class).
        window = self.window_tokens[replica.url]
        counts = [measured.tokens.s, measured.tokens.r, measured.tokens.f]
        first = 1 if counts[1] > 0 else (0 if counts[0] > 0 else 2)
        counts[first] = max(0.0, counts[first] - 1.0)
        for i in range(3):
            window[i] += counts[i]
        cost = plan.decision.cost_of(pool.name)
        batch = cost.batch if cost is not None else 1.0
        band = load_band(batch)
        self._timing(observation, measured, pool, model, kind, band)
        if not plan.explored:
            self._count_regret(model, pool, kind, band, batch, measured.total_tokens)
        if plan.decision.break_even_ws is not None:
            m.ws_break_even.labels(model=model, pool=pool.name).observe(plan.decision.break_even_ws)
        if not pool.speculative or cost is None or plan.estimate.speculation_unsupported:
            return None, None
        self._count_measured_saving(model, pool.name, kind, band, batch, cost.saving, measured.total_tokens)
        mix = law.ClassMix(plan.estimate.w_s, plan.estimate.w_r, max(0.0, 1 - plan.estimate.w_s - plan.estimate.w_r))
        predicted_tau = 1.0 / sum(w / (cost.tau[c] + 1.0) for c, w in mix.items()) - 1.0
        m.tau_predicted.labels(**labels).observe(predicted_tau)
        m.cost_predicted.labels(**labels).observe(1.0 - cost.saving)
        spec = pool.config.speculation
        assert spec is not None
        # a lookup is predicted per round, rounds without a match counted; vLLM counts only rounds that drafted
        tau_obs, source = (observation.tau_over_every_round(measured.total_tokens) if spec.method in LOOKUP_METHODS
                           else observation.observed_tau), "per_request"
        if tau_obs is None:
            tau_obs, source = self._attributed_tau(pool.name, measured), "counters"
        if tau_obs is None:
            return None, None
        depth = cost.gamma or pool.depth  # the depth it was priced at; a table's 0 there, the pool's own
        if depth == 0:
            return None, None
        cal = calibration.pool(pool.name, depth, spec.method)
        drafter = law.Drafter(depth, cal.delta(batch), cal.draft_cost_with(spec.draft_cost))
        tau_obs = min(tau_obs, float(depth))
        modelled = law.saving_from_tau(tau_obs, drafter)
        m.tau_observed.labels(**labels, source=source).observe(tau_obs)
        m.cost_modelled.labels(**labels).observe(1.0 - modelled)
        return tau_obs, modelled

    def _count_measured_saving(self, model: str, pool: str, kind: str, band: str, batch: float, predicted: float,
                               tokens: float) -> None:
        """The drift gauge and the GPU-seconds and money counters, from the measured saving of the
        request's class and load band; nothing is counted until both pools have been timed there."""
        timed = self._measured(kind, band)
        if timed is None:
            return
        saving, plain_per_token = timed
        m, settings = self.metrics, self.planner.settings
        drift = self.drift[(model, pool)]
        drift.append(predicted - saving)
        m.drift.labels(model=model, pool=pool).set(sum(drift) / len(drift))
        # a step's time is shared by the batch it serves: busy GPU-seconds per token are time per token over b
        gpu_seconds = tokens * plain_per_token / batch * saving
        price = settings.price_per_gpu_hour
        money = abs(gpu_seconds) / 3600.0 * price
        # both counters of a pair exist once either moves: the dashboard's net panels subtract one
        # from the other, and a missing series would blank a pool that has only ever saved
        saved, lost = max(gpu_seconds, 0.0), max(-gpu_seconds, 0.0)
        m.gpu_saved.labels(model=model, pool=pool).inc(saved)
        m.gpu_lost.labels(model=model, pool=pool).inc(lost)
        if price:
            m.money_saved.labels(model=model, pool=pool, currency=settings.currency).inc(money if saved else 0.0)
            m.money_lost.labels(model=model, pool=pool, currency=settings.currency).inc(money if lost else 0.0)

    def _count_regret(self, model: str, pool: Pool, kind: str, band: str, batch: float, tokens: float) -> None:
        """Routing regret, estimated: what a gated request cost over the kind of pool that, by the
        measured saving of its class and load band, was cheaper for it. The exploration share keeps
        both kinds measured; within a class, a request that would have paid elsewhere is not seen."""
        timed = self._measured(kind, band)
        if timed is None:
            return
        saving, plain_per_token = timed
        plain = tokens * plain_per_token / batch
        caused = plain * (1.0 - saving) if pool.speculative else plain
        regret = max(0.0, -saving if pool.speculative else saving) * plain
        self.metrics.routed_seconds.labels(model=model, kind=kind).inc(caused)
        if regret > 0:
            self.metrics.regret_seconds.labels(model=model, kind=kind).inc(regret)

    def _measured(self, kind: str, band: str) -> tuple[float, float] | None:
        """(saving, plain seconds per token) from time, streams first, for a class and load band."""
        for streamed in (True, False):
            spec, plain = self.tpot.get((True, kind, band, streamed)), self.tpot.get((False, kind, band, streamed))
            if spec is not None and plain is not None and plain > 0:
                return 1.0 - spec / plain, plain
        return None

    def _timing(self, observation: Observation, measured: ObservedStructure, pool: Pool, model: str, kind: str,
                band: str) -> None:
        m = self.metrics
        if observation.first_byte_at is None or observation.finished_at is None or measured.total_tokens < 2:
            return
        streamed = observation.finished_at > observation.first_byte_at
        if streamed:
            m.ttft.labels(pool=pool.name, kind=kind).observe(observation.first_byte_at - observation.started)
            per_token = (observation.finished_at - observation.first_byte_at) / (measured.total_tokens - 1)
            m.tpot.labels(pool=pool.name, kind=kind, load_band=band).observe(per_token)
            self.planner.answered(pool.name, observation.first_byte_at - observation.started, per_token,
                                  measured.total_tokens)
        else:  # one body: its whole time, prefill included, per token; compared with other whole answers only
            per_token = (observation.finished_at - observation.started) / measured.total_tokens
        key = (pool.speculative, kind, band, streamed)
        previous = self.tpot.get(key)
        self.tpot[key] = per_token if previous is None else previous + 0.1 * (per_token - previous)
        timed = self._measured(kind, band)
        if timed is not None:
            for p in self.pools:
                if p.speculative:
                    m.saving_time.labels(model=model, pool=p.name, kind=kind, load_band=band).set(timed[0])

    def _attributed_tau(self, pool: str, measured: ObservedStructure) -> float | None:
        replicas = self.pools.pools.get(pool)
        if replicas is None:
            return None
        taus: dict[str, float | None] = {}
        for replica in replicas.replicas.values():
            taus = self.attribution[replica.url].tau()
            if any(v is not None for v in taus.values()):
                break
        weights = {"s": measured.tokens.s, "r": measured.tokens.r, "f": measured.tokens.f}
        known = {c: t for c, t in taus.items() if t is not None and weights[c] > 0}
        if not known:
            return None
        total = sum(weights[c] for c in known)
        rounds = sum(weights[c] / total / (known[c] + 1.0) for c in known)
        return 1.0 / rounds - 1.0

    def keep_only(self, replica_urls: set[str]) -> None:
        """Forget the attribution state of replicas that are gone: kept per URL, it
        would otherwise grow with every rollout that gives the pods new addresses."""
        for state in (self.attribution, self.window_tokens, self.last_accepted, self.window_age):
            for url in [u for u in state if u not in replica_urls]:
                del state[url]

    # ------------------------------------------------------------ scrapes and gauges

    def on_scrape(self, pool: Pool, replica: Replica, values: dict[str, float], quiet: bool) -> None:
        """Close an attribution window for this replica (speculation pools only).

        ``quiet``: none of this proxy's requests were in flight on the replica while
        the scrape was under way, so every response counted in the window is in the
        counters read, and nothing in them belongs to a response still to come.
        """
        if not pool.speculative or "num_accepted_tokens" not in values:
            return
        accepted = values["num_accepted_tokens"]
        previous = self.last_accepted.get(replica.url)
        # Counters move while requests generate, tokens are counted when they finish:
        # close a window when nothing is in flight, or after enough scrapes that the
        # requests straddling its edges are a small part of it.
        age = self.window_age.get(replica.url, 0) + 1
        if previous is not None and not quiet and age < _MAX_WINDOW_SCRAPES:
            self.window_age[replica.url] = age
            return
        self.window_age[replica.url] = 0
        self.last_accepted[replica.url] = accepted
        tokens = self.window_tokens.pop(replica.url, [0.0, 0.0, 0.0])
        if previous is None:
            return
        attribution = self.attribution[replica.url]
        attribution.add_window(accepted - previous, tokens)
        for c, tau in attribution.tau().items():
            if tau is not None:
                self.metrics.tau_attributed.labels(pool=pool.name, token_class=c).set(tau)

    def refresh_gauges(self) -> None:
        planner, m = self.planner, self.metrics
        for pool in self.pools:
            m.pool_healthy.labels(pool=pool.name).set(len(pool.replicas_in_rotation()))
            m.pool_inflight.labels(pool=pool.name).set(pool.inflight)
        m.affinity_entries.set(len(planner.affinity))
        m.learner_shapes.set(len(planner.learner))
        cal = planner.calibration
        model = cal.model
        m.calibration_default.labels(model=model).set(1.0 if cal.is_default else 0.0)
        m.calibration_age.labels(model=model).set(max(0.0, time.time() - cal.created.timestamp()))
        m.calibration_parameter.labels(model=model, parameter="kappa").set(cal.kappa)
        for c in "srf":
            m.calibration_parameter.labels(model=model, parameter=f"rho_{c}").set(cal.rho_greedy.of(c))
        m.calibration_parameter.labels(model=model, parameter="prefill_seconds_per_token").set(
            cal.prefill_seconds_per_token)
        for pool in self.pools:
            spec = pool.config.speculation
            if spec is None or pool.depth == 0:
                continue
            pc = cal.pool(pool.name, pool.depth, spec.method)
            d = pc.draft_cost_with(spec.draft_cost)
            m.calibration_parameter.labels(model=model, parameter=f"draft_cost:{pool.name}").set(d)
            for band, b in BAND_POINTS.items():
                drafter = law.Drafter(pool.depth, pc.delta(b), d)
                exact = law.break_even_alpha(drafter)
                closed = law.break_even_eps_closed_form(drafter)
                m.break_even_alpha.labels(model=model, pool=pool.name, load_band=band, form="exact").set(
                    exact if exact is not None else 1.0)
                m.break_even_alpha.labels(model=model, pool=pool.name, load_band=band, form="closed_form").set(
                    1.0 - closed if closed is not None else 1.0)

    # ------------------------------------------------------------ log

    def _log(self, outcome: Outcome, route: str, measured: ObservedStructure | None, tau_obs: float | None,
             saving_obs: float | None) -> None:
        """The request's log line; docs/logs.md lists its fields."""
        plan, observation, status, overhead = outcome.plan, outcome.observation, outcome.status, outcome.overhead
        replica = outcome.replica.url if outcome.replica is not None else None
        record: dict[str, Any] = {
            "event": "request", "id": observation.response_id, "request_id": observation.request_id,
            "endpoint": plan.endpoint, "key": plan.caller.label,
            "model": plan.model or "", "route": route, "replica": replica,
            "decided": plan.decision.route, "explored": plan.explored, "kind": plan.kind,
            "status": status, "stream": streams(plan.body),
            "w_s_predicted": round(plan.estimate.w_s, 4),
            "predicted_saving": round(plan.decision.predicted_saving, 4),
            "failovers": observation.failovers,
            "duration_ms": round((time.perf_counter() - observation.started) * 1000, 2),
            "overhead_ms": round(overhead * 1000, 3),
            "reasons": list(plan.decision.reasons),
        }
        if measured is not None:
            record["w_s_observed"] = round(measured.w_s, 4)
            record["w_r_observed"] = round(measured.w_r, 4)
            record["completion_tokens"] = measured.total_tokens
            record["prompt_tokens"] = observation.prompt_tokens or round(plan.estimate.prompt_tokens)
            record["cached_tokens"] = round(record["prompt_tokens"] * plan.cached_share(route))
            record["temperature"] = plan.estimate.temperature
        if tau_obs is not None:
            record["tau_observed"] = round(tau_obs, 3)
            record["saving_modelled"] = round(saving_obs or 0.0, 4)
        RequestLog.write(record)
