"""Shared fixtures: emulated vLLM pools on loopback, several seeds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from draftgate.emulator.app import EmulatorConfig, create_app
from draftgate.emulator.engine import SpecConfig
from draftgate.emulator.profile import EngineProfile
from draftgate.proxy.serving import settle_startup_heap
from draftgate.servers import ServerThread
from draftgate.workloads import BFCL_SAMPLE

# CI explores the same examples every run, so a landing never hinges on a lucky draw;
# local runs keep exploring new ones.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None)
hypothesis_settings.register_profile("dev", deadline=None)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "dev")

ROOT = Path(__file__).parents[1]
SEEDS = [1, 2, 3]


def accepted_vllm_flags() -> set[str]:
    """The flags the pinned vLLM release's ``vllm serve`` accepts (deploy/vllm/flags-<version>.txt)."""
    from draftgate.proxy.launch import VLLM_VERSION

    listing = ROOT / "deploy" / "vllm" / f"flags-{VLLM_VERSION}.txt"
    return {line.strip() for line in listing.read_text().splitlines() if line.startswith("--")}
FAST = 0.02  # wall seconds per simulated second: a 17 ms decode step takes 0.34 ms


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection built, as ``draftgate serve`` freezes its startup heap.

    The emulators, proxies and clients of these tests share this process, whose
    modules, hypothesis strategies and libraries are some 200,000 objects: a full
    collection walking them stopped all of it for up to 0.2 s, in the middle of
    tests that time a stream's events or a disconnect.
    """
    settle_startup_heap()


@pytest.fixture(autouse=True, scope="module")
def _freeze_between_modules() -> None:
    """And again as each module starts, once what the last one left is collected: its
    servers are gone, and what lives on (caches, hypothesis' examples) need not be
    walked again. Over six of the server-heavy modules the longest full collection
    went from 149 to 91 ms and their total from 1.3 to 0.8 s; peak memory stayed at
    219 MB."""
    settle_startup_heap()


def emulator(seed: int, speculative: bool, *, k: int = 8, time_scale: float = FAST, profile_seed: int | None = None,
             **overrides: Any) -> ServerThread:
    profile = EngineProfile.random(profile_seed) if profile_seed is not None else EngineProfile()
    fields: dict[str, Any] = {
        "profile": profile,
        "spec": SpecConfig("draft_model", k, draft_model="Qwen/Qwen3-4B") if speculative else None,
        "per_request_metrics": "summary" if speculative else "none",
        "force_include_usage": True,
        "seed": seed,
        "time_scale": time_scale,
        # Qwen3 thinks unless told not to; the tests ask for thinking where they want it
        "default_chat_template_kwargs": {"enable_thinking": False},
    }
    config = EmulatorConfig(**{**fields, **overrides})
    return ServerThread(create_app(config))


@pytest.fixture(scope="module", params=SEEDS, ids=lambda s: f"seed{s}")
def pools(request: pytest.FixtureRequest) -> Iterator[tuple[ServerThread, ServerThread]]:
    """A speculation-on and a speculation-off emulator sharing one random profile."""
    seed = request.param
    with emulator(seed, True, profile_seed=seed) as on, emulator(seed, False, profile_seed=seed) as off:
        yield on, off


@pytest.fixture(scope="session")
def bfcl_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in BFCL_SAMPLE.open()]
