"""Start real servers on loopback: in a thread (fast, for tests) or as a process
(exactly as an operator runs them). Both bind 127.0.0.1 on a free port and
return only once the server answers ``/health``."""

from __future__ import annotations

import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import httpx
import uvicorn

# vllm serve's arguments that make Qwen3 answer without thinking unless a request asks:
# for emulated pools serving traffic that does not set the switch itself
NO_THINKING = ("--default-chat-template-kwargs", '{"enable_thinking": false}')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerStartError(RuntimeError):
    """A server process that exited or never became healthy."""


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if this process dies, so nothing is left behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_healthy(url: str, timeout: float = 30.0, process: subprocess.Popen[Any] | None = None,
                 verify: ssl.SSLContext | bool = True) -> None:
    """``verify``: for an https ``url``, what trusts the server's certificate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServerStartError(f"server at {url} exited with status {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1.0, verify=verify).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise ServerStartError(f"server at {url} did not become healthy within {timeout}s")


class ServerThread:
    """An ASGI app under uvicorn in a background thread, on a real socket."""

    def __init__(self, app: Any, port: int | None = None, options: dict[str, Any] | None = None) -> None:
        """``options``: more uvicorn.Config settings (the proxy's are ``draftgate.proxy.serving.uvicorn_options``)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = {"log_level": "warning", "access_log": False, **(options or {})}
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, lifespan="on", **settings))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server thread did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class ServerProcess:
    """``draftgate <subcommand> ...`` as a child process (or ``python -m <module> ...``)."""

    def __init__(self, args: list[str], port: int | None = None, health_timeout: float = 60.0,
                 module: str = "draftgate.cli.main", ca_file: str | None = None, open_files: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        """``ca_file``: the server serves https with a certificate this CA bundle verifies.
        ``open_files``: the soft open-files limit the process starts with, as a container runtime sets it.
        ``env``: environment variables set for it besides this process's own."""
        self.port = port or free_port()
        self.url = f"{'https' if ca_file else 'http'}://127.0.0.1:{self.port}"
        self.verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca_file) if ca_file else True
        self.args = [sys.executable, "-m", module, *args, "--port", str(self.port)]
        self.health_timeout = health_timeout
        self.process: subprocess.Popen[str] | None = None
        # a file, not a pipe: a chatty server must never block on a full pipe
        self.log = tempfile.NamedTemporaryFile("w+", prefix="draftgate-", suffix=".log", delete=False)
        self.open_files = open_files
        self.env = env or {}

    def __enter__(self) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        self.process = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, text=True, env=env,
                                        preexec_fn=self._in_child)
        try:
            wait_healthy(self.url, self.health_timeout, self.process, self.verify)
        except Exception:
            self.__exit__()
            raise
        return self

    def _in_child(self) -> None:
        _die_with_parent()
        if self.open_files is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, hard))

    def output(self) -> str:
        """Everything the process has printed so far."""
        with open(self.log.name) as f:
            return f.read()

    def __exit__(self, *exc: Any) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
