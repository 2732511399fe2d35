"""``draftgate emulate``: an emulated vLLM server, flags mirroring ``vllm serve``."""

from __future__ import annotations

import argparse
import gc
import json
import os
from typing import Any

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8101)
    parser.add_argument("--model", default="Qwen/Qwen3-32B",
                        help="served model id; a catalogue model (docs/emulator.md) is also the target emulated")
    parser.add_argument("--gpu", help="a catalogue GPU: H100, H200 (the default) or B200")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, help="GPUs the target is split over: 1, 2, 4 or 8")
    parser.add_argument("--speculative-config", help="JSON, as vllm serve takes it; omit for speculation off")
    parser.add_argument("--per-request-spec-decode-metrics", choices=["none", "summary", "detailed"], default="none")
    parser.add_argument("--enable-force-include-usage", action="store_true")
    parser.add_argument("--max-num-seqs", type=int, help="sequences a step may run (vLLM's default on an H200: 1024)")
    parser.add_argument("--max-num-batched-tokens", type=int,
                        help="tokens a step may schedule, decodes and prefill chunks (vLLM's default on an H200: 8192)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per simulated second")
    parser.add_argument("--profile", help="engine profile YAML: efficiencies, overheads, and gpus/models entries that "
                                           "extend the catalogue (defaults: Qwen3-32B on one H200)")
    parser.add_argument("--profile-seed", type=int, help="draw every uncertain profile figure from this seed")
    parser.add_argument("--faults", help="JSON fault settings, e.g. '{\"health_503\": true}'")
    parser.add_argument("--default-chat-template-kwargs", metavar="JSON",
                        help="as vllm serve takes it; its enable_thinking sets whether the template thinks when "
                             "a request does not say (Qwen3's does): '{\"enable_thinking\": false}'")


def parse_speculative_config(text: str | None) -> Any:
    """vLLM's ``--speculative-config`` JSON, checked for what the emulator needs."""
    from draftgate.emulator.engine import SpecConfig

    if not text:
        return None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"--speculative-config is not valid JSON: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise CliError("--speculative-config must be a JSON object")
    method = raw.get("method", "draft_model")
    k = raw.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= 64:
        raise CliError("--speculative-config: num_speculative_tokens must be an integer in [1, 64]")
    if method not in ("draft_model", "ngram", "eagle", "eagle3", "mtp", "suffix", "medusa"):
        raise CliError(f"--speculative-config: unknown method {method!r}")
    table = raw.get("num_speculative_tokens_per_batch_size") or []
    try:
        per_batch = tuple((int(lo), int(hi), int(kk)) for lo, hi, kk in table)
    except (TypeError, ValueError):
        raise CliError("--speculative-config: num_speculative_tokens_per_batch_size is a list of [lo, hi, K]") from None
    low, high = raw.get("prompt_lookup_min"), raw.get("prompt_lookup_max")
    for name, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise CliError(f"--speculative-config: {name} must be an integer >= 1")
    # vLLM's resolution: both 5 when neither is given, else the one given for both
    low, high = (5, 5) if low is None and high is None else (low or high, high or low)
    if low > high:
        raise CliError("--speculative-config: prompt_lookup_min must not exceed prompt_lookup_max")
    return SpecConfig(method, k, per_batch, raw.get("model"), low, high)


def load_profile(path: str | None, gpu: str | None, model: str | None, tensor_parallel_size: int | None) -> Any:
    """The profile a server runs: a profile file's (or the default), on ``gpu`` at
    ``tensor_parallel_size`` where given, emulating ``model`` where the catalogue knows it."""
    from draftgate.emulator.hardware import Catalogue
    from draftgate.emulator.profile import EngineProfile, read_profile_file

    raw = read_profile_file(path) if path else {}
    known = model is not None and model in Catalogue.load(raw).models
    return EngineProfile.from_mapping(raw, gpu, model if known else None, tensor_parallel_size)


def _drafting_with(profile: Any, spec: Any) -> Any:
    """``profile`` drafting with the model ``spec`` names; a server starts whatever it is given, so a
    model the catalogue does not hold drafts as the catalogue's drafter of its kind, and says so."""
    import sys

    from draftgate.emulator.hardware import UnknownName

    try:
        return profile.with_drafter(spec.method, spec.draft_model)
    except UnknownName:
        shape = profile.drafter(spec.method).shape
        print(f"draftgate emulate: {spec.draft_model} is not in the emulator's catalogue; it drafts as "
              f"{shape.name if shape else 'a lookup'} does", file=sys.stderr, flush=True)
        return profile


def build_config(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from draftgate.emulator.app import EmulatorConfig
    from draftgate.emulator.faults import Faults
    from draftgate.emulator.profile import EngineProfile

    spec = parse_speculative_config(args.speculative_config)
    try:
        profile = load_profile(args.profile, args.gpu, args.model, args.tensor_parallel_size)
        if args.profile_seed is not None:
            profile = EngineProfile.random(args.profile_seed, profile)
        if spec is not None:
            profile = _drafting_with(profile, spec)
        profile.kv_capacity_tokens(spec.method if spec else None)  # do the weights fit
        faults = Faults.model_validate(json.loads(args.faults)) if args.faults else Faults()
    except (OSError, ValidationError, ValueError) as exc:
        raise CliError(f"invalid profile or faults: {str(exc).splitlines()[0]}") from None
    try:
        template = json.loads(args.default_chat_template_kwargs) if args.default_chat_template_kwargs else {}
    except json.JSONDecodeError as exc:
        raise CliError(f"--default-chat-template-kwargs is not valid JSON: {exc.msg}") from None
    if not isinstance(template, dict):
        raise CliError("--default-chat-template-kwargs must be a JSON object")
    if args.time_scale <= 0:
        raise CliError("--time-scale must be > 0")
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        raise CliError("--max-num-seqs must be >= 1")
    if args.max_num_batched_tokens is not None and args.max_num_batched_tokens < 1:
        raise CliError("--max-num-batched-tokens must be >= 1")
    return EmulatorConfig(
        model=args.model, profile=profile, spec=spec,
        per_request_metrics=args.per_request_spec_decode_metrics, force_include_usage=args.enable_force_include_usage,
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens, seed=args.seed,
        time_scale=args.time_scale, faults=faults,
        # as vLLM reads it: an environment variable, not a flag
        responses_store=os.environ.get("VLLM_ENABLE_RESPONSES_API_STORE", "0").lower() in ("1", "true"),
        default_chat_template_kwargs=template,
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from draftgate.emulator.app import EMULATOR_NOTE, create_app

    config = build_config(args)
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning",
                                           access_log=False, timeout_graceful_shutdown=2))

    def refuse() -> None:
        for listener in server.servers:
            listener.close()

    app.state.emulator.refuse_hook = refuse
    spec = (f"speculation on ({config.spec.method}, K={config.spec.num_speculative_tokens})"
            if config.spec else "speculation off")
    print(f"{EMULATOR_NOTE}: serving {config.model} with {spec} on http://{args.host}:{args.port}"
          f" (time scale {config.time_scale:g})", flush=True)
    # what startup built lives as long as the process: out of the cycle collector's walks,
    # whose pauses would land in the latencies the benchmarks compare (vLLM does the same)
    gc.collect()
    gc.freeze()
    server.run()
    return 0
