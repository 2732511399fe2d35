"""A proxy in front of two emulated pools, all real servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from draftgate.proxy.app import create_app
from draftgate.proxy.config import load_settings
from draftgate.proxy.observe import Observation
from draftgate.proxy.serving import uvicorn_options
from draftgate.servers import ServerThread
from tests.conftest import emulator


@dataclass
class Stack:
    proxy: ServerThread
    on: ServerThread
    off: ServerThread

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.proxy.url}/v1", api_key="none", max_retries=0, timeout=60)

    def metric(self, name: str, **labels: str) -> float:
        return metric_value(httpx.get(f"{self.proxy.url}/metrics").text, name, **labels)


def metric_value(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def hold_answer_readings(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Make the in-process proxy's readings of whole answers (a body, or a Responses
    stream's closing event) wait until the returned event is set: what the client
    gets, and when, must not depend on them."""
    release = threading.Event()
    read = Observation.feed_answer

    async def held(self: Observation, raw: bytes) -> None:
        while not release.is_set():
            await asyncio.sleep(0.005)
        await read(self, raw)

    monkeypatch.setattr(Observation, "feed_answer", held)
    return release


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Poll until ``condition()`` holds or ``seconds`` pass; says whether it came to hold, for the caller to assert."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@contextlib.contextmanager
def no_collector_pauses() -> Iterator[None]:
    """Hold the cycle collector off while a test times something as short as its pauses.

    The servers and the client of these tests share one process, so a full
    collection stops them all at once; the emulator then catches up, and events
    it would have sent apart come in one burst.
    """
    gc.collect()  # what is pending now, before the timing starts
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def container_health_check(port: int) -> int:
    """The Docker image's HEALTHCHECK against a proxy on ``port``: its exit status."""
    env = {**os.environ, "DRAFTGATE_PORT": str(port)}
    return subprocess.run([sys.executable, "-m", "draftgate.proxy.healthcheck"], env=env, timeout=30).returncode


def proxy_server(app: Any) -> ServerThread:
    """The proxy app under uvicorn with the options ``draftgate serve`` uses."""
    return ServerThread(app, options=uvicorn_options(app.state.proxy.settings))


def proxy_settings(on_url: str, off_url: str, **overrides: Any):  # type: ignore[no-untyped-def]
    spec_pool = {"name": "spec-on", "urls": [on_url], "speculation": {"gamma": 8},
                 "max_num_seqs": overrides.pop("spec_max_num_seqs", 256),
                 "per_request_metrics": overrides.pop("pools_per_request_metrics", True)}
    settings: dict[str, Any] = {
        "pools": [spec_pool, {"name": "spec-off", "urls": [off_url],
                              "max_num_seqs": overrides.pop("off_max_num_seqs", 256)}],
        "health": {"interval": 0.2, "scrape_interval": 0.3}, "log_requests": False,
        # routes must be deterministic in tests; tests of exploration turn it on themselves
        "exploration_share": 0.0,
        # the emulated pools run with --default-chat-template-kwargs '{"enable_thinking": false}'
        "structure_priors": {"thinking_by_default": False},
    }
    for key, value in overrides.items():  # a group given is merged into the one above
        settings[key] = {**settings[key], **value} if isinstance(settings.get(key), dict) else value
    return load_settings(None, **settings)


@contextlib.contextmanager
def stack(seed: int = 1, *, on_kwargs: dict[str, Any] | None = None, off_kwargs: dict[str, Any] | None = None,
          **overrides: Any) -> Iterator[Stack]:
    with emulator(seed, True, profile_seed=seed, **(on_kwargs or {})) as on, \
            emulator(seed, False, profile_seed=seed, **(off_kwargs or {})) as off:
        app = create_app(proxy_settings(on.url, off.url, **overrides))
        with proxy_server(app) as proxy:
            yield Stack(proxy, on, off)
