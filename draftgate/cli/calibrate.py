"""``draftgate calibrate``: the four-arm protocol against real (or emulated) pools."""

from __future__ import annotations

import argparse
from pathlib import Path

from draftgate.cli.addresses import base_url
from draftgate.cli_error import CliError


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("values must be integers >= 1")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spec-on", action="append", required=True, metavar="URL",
                        help="a speculation pool; repeat for several depths (matched to --gammas in order)")
    parser.add_argument("--spec-off", required=True, metavar="URL", help="the plain pool")
    parser.add_argument("--gammas", type=_ints, default=[8], help="depth of each --spec-on pool (default 8)")
    parser.add_argument("--methods", default=None,
                        help="method of each --spec-on pool, comma-separated, in order (draft_model, eagle, eagle3, "
                             "mtp, ngram, suffix; default draft_model): each pool gets its own fit")
    parser.add_argument("--model", default="Qwen/Qwen3-32B")
    parser.add_argument("--concurrency", type=_ints, default=[1, 4, 16, 64, 128],
                        help="loads to measure c_T and delta at, up to the batch your pools run at (the gate "
                             "interpolates between them and extrapolates past the last, saying so)")
    parser.add_argument("--arms", default="A,B,C,D", help="arms to run (A prose, B tools, C reasoning, D agent)")
    parser.add_argument("--workload", action="append", default=[], metavar="ARM=FILE.jsonl",
                        help="replace an arm's requests with your own chat requests (JSONL)")
    parser.add_argument("--requests", type=int, default=16, help="requests per arm and run")
    parser.add_argument("--temperatures", default="greedy,default",
                        help="greedy (temperature 0) and/or default (the pool's own)")
    parser.add_argument("--default-temperature", type=float, default=0.6,
                        help="the temperature the pools apply by default (Qwen3: 0.6)")
    parser.add_argument("--dynamic-k", metavar="URL", help="a pool with num_speculative_tokens_per_batch_size")
    parser.add_argument("--out", default="calibration.yaml")
    parser.add_argument("--gpu", default="H200", help="the pools' GPU, from the emulator's catalogue (H100, H200, "
                        "B200): the hardware profile is fitted on its datasheet")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs per replica of the pools")
    parser.add_argument("--profile-out", help="where the fitted hardware profile goes, for simulate, emulate and "
                        "validate's --profile (default: OUT with .profile.yaml)")
    parser.add_argument("--report", help="write the falsification report (Markdown with figures)")
    parser.add_argument("--state", help="resumable state file (default: OUT.state.jsonl)")


def run(args: argparse.Namespace) -> int:
    import asyncio

    import httpx

    from draftgate.calibrate import protocol
    from draftgate.calibrate.runner import BackendError, check_backend
    from draftgate.calibration_file import save_calibration
    from draftgate.emulator.profile import EngineProfile
    from draftgate.policy.calibration import METHOD_DEFAULTS

    try:
        hardware = EngineProfile.build(args.gpu, args.model, args.tensor_parallel_size)
        hardware.kv_capacity_tokens(None)
    except ValueError as exc:  # an unknown GPU or model, a size that is not a power of two, too small a GPU
        hardware, no_profile = None, str(exc).splitlines()[0]
    if len(args.gammas) != len(args.spec_on):
        raise CliError(f"{len(args.spec_on)} --spec-on pool(s) but {len(args.gammas)} depth(s) in --gammas")
    arms = [a.strip().upper() for a in args.arms.split(",") if a.strip()]
    if not arms or any(a not in protocol.ARM_NAMES for a in arms):
        raise CliError(f"--arms takes letters from A, B, C, D; got {args.arms!r}")
    regimes = [r.strip() for r in args.temperatures.split(",") if r.strip()]
    if not regimes or any(r not in ("greedy", "default") for r in regimes):
        raise CliError("--temperatures takes greedy and/or default")
    if args.requests < 2:
        raise CliError("--requests must be at least 2")
    sources = {}
    for item in args.workload:
        arm, _, file = item.partition("=")
        if arm.upper() not in protocol.ARM_NAMES or not file:
            raise CliError(f"--workload takes ARM=FILE.jsonl, got {item!r}")
        sources[arm.upper()] = Path(file)
    try:
        workloads = {a: protocol.load_arm(a, sources.get(a)) for a in arms}
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read a workload: {exc}") from None
    methods = [m.strip() for m in args.methods.split(",")] if args.methods else ["draft_model"] * len(args.spec_on)
    if len(methods) != len(args.spec_on):
        raise CliError(f"{len(args.spec_on)} --spec-on pool(s) but {len(methods)} method(s) in --methods")
    unknown = [m for m in methods if m not in METHOD_DEFAULTS]
    if unknown:
        raise CliError(f"--methods: unknown {', '.join(unknown)} (known: {', '.join(METHOD_DEFAULTS)})")
    names = [f"spec-{m}-{g}" if len(set(methods)) > 1 else f"spec-{g}" for m, g in zip(methods, args.gammas)]
    spec = [protocol.Pool(name if len(args.spec_on) > 1 else "spec-on", base_url(url, "--spec-on"), g, m)
            for name, url, g, m in zip(names, args.spec_on, args.gammas, methods)]
    off = protocol.Pool("spec-off", base_url(args.spec_off, "--spec-off"), 0)
    dynamic = (protocol.Pool("dynamic-k", base_url(args.dynamic_k, "--dynamic-k"), max(args.gammas))
               if args.dynamic_k else None)

    async def check() -> None:
        async with httpx.AsyncClient() as client:
            for pool in [*spec, off, *([dynamic] if dynamic else [])]:
                await check_backend(client, pool.url, args.model)

    try:
        asyncio.run(check())
    except BackendError as exc:
        raise CliError(str(exc)) from None
    plan = protocol.CalibrationPlan(args.model, spec, off, arms, sorted(set(args.concurrency)), regimes,
                                    args.requests, dynamic, workloads)
    state_path = Path(args.state or f"{args.out}.state.jsonl")
    try:
        state = protocol.execute(plan, state_path, protocol.progress_bar)
    except BackendError as exc:
        raise CliError(f"{exc} (completed runs are kept in {state_path}; rerun to resume)") from None
    except httpx.HTTPError as exc:
        raise CliError(f"a backend failed during calibration: {type(exc).__name__} "
                       f"(completed runs are kept in {state_path}; rerun to resume)") from None
    fitted = protocol.fit(plan, state, args.default_temperature)
    save_calibration(fitted.calibration, args.out)
    print(f"calibration written to {args.out} (kappa {fitted.calibration.kappa:.3f}; "
          + ", ".join(f"c_T({b})={v * 1000:.2f} ms" for b, v in sorted(fitted.c_t.items())) + ")")
    for name, pool_fit in fitted.pools.items():
        print(f"  {name} ({pool_fit.method}, gamma {pool_fit.gamma}): d={pool_fit.draft_cost:.3f}, delta "
              + (", ".join(f"{v:.3f} at {b:.0f}" for b, v in pool_fit.delta) or "not measured")
              + ("" if pool_fit.kappa is None else f", kappa {pool_fit.kappa:.3f}"))
    if hardware is None:
        print(f"no hardware profile: {no_profile}")
    else:
        import yaml

        from draftgate.calibrate.hardware_fit import fit_hardware

        profile = fit_hardware(plan, state, fitted, hardware)
        profile_out = Path(args.profile_out or str(Path(args.out).with_suffix("")) + ".profile.yaml")
        profile_out.write_text(yaml.safe_dump(profile.as_file(), sort_keys=False))
        print(f"hardware profile written to {profile_out}:")
        for figure, note in profile.notes.items():
            print(f"  {figure}: {note}")
    if args.report:
        from draftgate.calibrate.report import write_report

        write_report(Path(args.report), plan, state, fitted)
        print(f"report written to {args.report}")
    return 0
