"""``draftgate pools``: the two ``vllm serve`` command lines, or (``--run``) the servers."""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="Qwen/Qwen3-32B")
    parser.add_argument("--draft", default="Qwen/Qwen3-4B")
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--spec-gpus", default="0", help="CUDA_VISIBLE_DEVICES of the speculation pool")
    parser.add_argument("--plain-gpus", default="1", help="CUDA_VISIBLE_DEVICES of the plain pool")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.90)
    parser.add_argument("--spec-port", type=int, default=8001)
    parser.add_argument("--plain-port", type=int, default=8002)
    parser.add_argument("--run", action="store_true", help="start both servers and wait until they are healthy")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds to wait for health with --run")


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from draftgate.proxy.launch import LaunchSettings, commands, gpu_env

    try:
        settings = LaunchSettings(target=args.target, draft=args.draft, depth=args.depth, spec_gpus=args.spec_gpus,
                                  plain_gpus=args.plain_gpus, gpu_memory_utilization=args.gpu_memory_utilization,
                                  spec_port=args.spec_port, plain_port=args.plain_port)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise CliError(f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    argv, env = commands(settings), gpu_env(settings)
    if not args.run:
        for name in argv:
            env_text = " ".join(f"{k}={v}" for k, v in env[name].items())
            print(f"# {name}\n{env_text} {shlex.join(argv[name])}\n")
        print(f"# then: draftgate serve --spec-on http://{settings.host}:{settings.spec_port} "
              f"--spec-off http://{settings.host}:{settings.plain_port}")
        return 0
    if shutil.which("vllm") is None:
        raise CliError("vllm is not installed here: pip install 'draftgate[vllm]' (on a GPU host)")
    import os

    from draftgate.servers import ServerStartError, wait_healthy

    processes = []
    try:
        for name, cmd in argv.items():
            processes.append(subprocess.Popen(cmd, env={**os.environ, **env[name]}))
        for port in (settings.spec_port, settings.plain_port):
            wait_healthy(f"http://{settings.host}:{port}", args.timeout)
        print("both pools are healthy; Ctrl-C stops them", flush=True)
        for p in processes:
            p.wait()
    except ServerStartError as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        for p in processes:
            if p.poll() is None:
                p.terminate()
    return 0 if all(p.returncode in (0, -15, None) for p in processes) else 1
