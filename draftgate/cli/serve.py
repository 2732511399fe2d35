"""``draftgate serve``: run the proxy, from a config file or the quick-start flags."""

from __future__ import annotations

import argparse
from typing import Any

from draftgate.cli_error import CliError


def _urls(text: str) -> list[str]:
    return [u.strip() for u in text.split(",") if u.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML configuration file (environment DRAFTGATE_* overrides it)")
    parser.add_argument("--spec-on", type=_urls, default=[], help="speculation pool replica URL(s), comma-separated")
    parser.add_argument("--spec-off", type=_urls, default=[], help="plain pool replica URL(s), comma-separated")
    parser.add_argument("--gamma", type=int, help="depth of the --spec-on pool (default: what the pool's /metrics "
                        "reports)")
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8000)")
    parser.add_argument("--calibration", help="calibration file written by draftgate calibrate")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration (and calibration file), print what would be served, "
                             "and exit: 0 if it would start, 2 if not")


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    from draftgate.proxy.config import quick_start_pools

    out: dict[str, Any] = {}
    if args.spec_on or args.spec_off:
        out["pools"] = quick_start_pools(args.spec_on, args.spec_off, args.gamma)
    if args.host:
        out["host"] = args.host
    if args.port is not None:
        out["port"] = args.port
    if args.calibration:
        out["calibration_file"] = args.calibration
    return out


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from draftgate.proxy import logs
    from draftgate.proxy.app import create_app
    from draftgate.proxy.config import ConfigError, load_settings
    from draftgate.proxy.open_files import raise_open_files_limit
    from draftgate.proxy.serving import (
        SignalAwareServer,
        settle_startup_heap,
        uvicorn_options,
    )

    if not args.config and not (args.spec_on or args.spec_off):
        raise CliError("give --config FILE, or --spec-on URL and --spec-off URL")
    extra = overrides(args)

    def load():  # type: ignore[no-untyped-def]
        return load_settings(args.config, **extra)

    try:
        settings = load()
        app = create_app(settings, reload_settings=load if args.config else None)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    pools = ", ".join(f"{p.name} ({_depth(p.speculation.gamma) if p.speculation else 'plain'})"
                      for p in settings.pools)
    where = f"{settings.scheme}://{settings.host}:{settings.port}/v1 in front of {pools}"
    if args.check:  # a deploy pipeline's gate: the same validation as a start, without the start
        print(f"draftgate: configuration ok: would serve on {where}", flush=True)
        return 0
    logs.configure(args.log_level)
    before, after = raise_open_files_limit()
    if after != before:
        print(f"draftgate: open files limit raised from {before} to {after}", flush=True)
    print(f"draftgate: serving on {where}", flush=True)
    # On SIGTERM uvicorn stops accepting at once and lets requests in flight finish, up to
    # the grace; the proxy ends what still runs just before that (proxy/shutdown.py).
    grace = settings.timeouts.graceful_shutdown
    config = uvicorn.Config(app, host=settings.host, port=settings.port, timeout_graceful_shutdown=grace,
                            ssl_certfile=settings.tls.certfile, ssl_keyfile=settings.tls.keyfile,
                            log_config=None,  # logs.configure formats uvicorn's lines
                            **uvicorn_options(settings))
    server = SignalAwareServer(config, on_signal=lambda: app.state.proxy.shutdown.begin(grace))
    settle_startup_heap()
    server.run()
    return 0 if server.started else 3  # as uvicorn.run exits when it could not start (a port in use)


def _depth(gamma: int | None) -> str:
    return "gamma as the pool reports it" if gamma is None else f"gamma={gamma}"
