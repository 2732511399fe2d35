"""The four-arm calibration protocol run on simulated pools: the gate's calibration for a verdict.

The protocol's own plan, batches and fit (``draftgate/calibrate/protocol.py``);
only the batches run here in virtual time, each on a fresh server of the pool's
configuration, as closed loops at the protocol's concurrencies. Every answer is
read as the calibration reads a real pool's (``runner.read_whole_answer``,
``runner.settle``), with vLLM's per-request speculation metrics; its timings
are the simulation's, in simulated seconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from draftgate.calibrate import protocol
from draftgate.calibrate.hardware_fit import HardwareFit, fit_hardware
from draftgate.calibrate.runner import Record, prepare, read_whole_answer, settle
from draftgate.emulator import wire
from draftgate.emulator.engine import Sequence
from draftgate.emulator.profile import EngineProfile
from draftgate.evaluate.fleet import Fleet, PoolSpec
from draftgate.evaluate.requests import Bank, Prepared
from draftgate.evaluate.simulation import Served, Simulation, proxy_settings
from draftgate.evaluate.traffic import ClosedLoop
from draftgate.policy.calibration import Calibration
from draftgate.policy.structure import TextParts
from draftgate.workloads.mix import MODEL

ARMS = ("A", "B", "C", "D")
OFF = "spec-off"


@dataclass(frozen=True)
class Calibrated:
    """What calibration learned of the pools: the gate's fit, and the engine profile fitted from the
    same runs (``calibrate.hardware_fit``), from which the plan simulates the fleets it weighs; and the
    runs themselves (``protocol.execute``'s state)."""

    fit: protocol.Fit
    hardware: HardwareFit
    state: dict[str, dict[str, Any]]


def calibrate(bank: Bank, pools: list[PoolSpec], arms: dict[str, list[dict[str, Any]]], requests: int,
              concurrency: tuple[int, ...], max_num_seqs: int, base: EngineProfile | None = None) -> Calibrated:
    """Fit a calibration of every speculating pool in ``pools`` against a plain server, from ``arms``;
    and ``base`` (the catalogue's GPU and target, the default profile when None) fitted to the same runs."""
    spec = [protocol.Pool(p.name, f"sim://{p.name}", p.depth, p.method or "draft_model") for p in pools
            if p.speculative]
    plan = protocol.CalibrationPlan(MODEL, spec, protocol.Pool(OFF, f"sim://{OFF}", 0), list(ARMS), list(concurrency),
                                    ["greedy", "default"], requests, None, arms,
                                    nonce=lambda i: f"prefill-{bank.seed}-{i}")
    servers = {p.name: PoolSpec(p.name, 1, p.method, p.depth, p.lookup) for p in pools if p.speculative}
    servers[OFF] = PoolSpec(OFF, 1)

    def batch(pool: protocol.Pool, bodies: list[dict[str, Any]], template: Record, model: str
              ) -> tuple[list[Record], dict[str, float]]:
        return closed_loop(bank, servers[pool.name], bodies, template, model, max_num_seqs)

    state = protocol.execute(plan, None, batch=batch)
    fit = protocol.fit(plan, state, 0.6)
    return Calibrated(fit, fit_hardware(plan, state, fit, base or EngineProfile()), state)


def closed_loop(bank: Bank, server: PoolSpec, bodies: list[dict[str, Any]], template: Record, model: str,
                max_num_seqs: int) -> tuple[list[Record], dict[str, float]]:
    """One batch on a fresh server of ``server``'s configuration, at the template's concurrency."""
    fleet = Fleet((server,))
    requests = []
    for body in bodies:
        prepared = prepare(body, model, template.regime, template.kind)
        digest = hashlib.blake2b(json.dumps(prepared, sort_keys=True).encode(), digest_size=12).hexdigest()
        requests.append(bank.prepared(f"calibration|{digest}", "calibration", prepared))
    sim = Simulation(fleet, bank, proxy_settings(fleet, max_num_seqs), Calibration(), bank.seed, max_num_seqs)
    records: list[Record] = []

    def answered(served: Served, seq: Sequence, request: Prepared) -> None:
        record = Record(**{**asdict(template), "index": len(records)})
        record.status = 200
        metrics = wire.spec_metrics([seq], "summary" if server.speculative else "none")
        assert request.written is not None
        answer = wire.final_body("sim", model, request.body, "chat", [seq], [request.written.generated],
                                 len(request.prompt.tokens), metrics)
        parts = TextParts()
        read_whole_answer(record, answer, parts)
        record.ttft = served.ttft
        record.decode_time = (served.last_token or 0.0) - (served.first_token or 0.0)
        record.total = served.e2e
        records.append(settle(record, request.body, parts))

    sim.on_answer = answered
    traffic = ClosedLoop(requests, template.concurrency)
    sim.run(traffic, (0.0, float("inf")), float("inf"))
    engine = next(iter(sim.replicas.values())).engine
    counters = {"num_drafts": float(engine.num_drafts), "num_draft_tokens": float(engine.num_draft_tokens),
                "num_accepted_tokens": float(engine.num_accepted_tokens),
                "generation_tokens": float(engine.generated_tokens)}
    return records, counters
