"""The two vLLM servers draftgate sits in front of, as command lines.

One source for ``draftgate pools``, the docker-compose stack and the Helm
chart's defaults: the same target, speculation on (a same-family draft, depth
8) and off, usage forced into streams, per-request speculation metrics, tool
calling and the Qwen3 reasoning parser. A test checks every generated flag
against the pinned vLLM version's own list (deploy/vllm/flags-<version>.txt).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

VLLM_VERSION = "0.33.0"
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"


class LaunchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = "Qwen/Qwen3-32B"
    draft: str = "Qwen/Qwen3-4B"
    depth: int = Field(8, ge=1, le=32)
    host: str = "127.0.0.1"
    spec_port: int = 8001
    plain_port: int = 8002
    spec_gpus: str = "0"
    plain_gpus: str = "1"
    gpu_memory_utilization: float = Field(0.90, gt=0.0, le=0.98)
    max_num_seqs: int = Field(256, ge=1)
    max_model_len: int = Field(32768, ge=1024)
    tool_call_parser: str = "hermes"
    reasoning_parser: str = "qwen3"
    extra_args: list[str] = Field(default_factory=list)


def _common(s: LaunchSettings, port: int) -> list[str]:
    return [
        "vllm", "serve", s.target, "--host", s.host, "--port", str(port), "--served-model-name", s.target,
        "--gpu-memory-utilization", f"{s.gpu_memory_utilization:g}", "--max-num-seqs", str(s.max_num_seqs),
        "--max-model-len", str(s.max_model_len), "--enable-prefix-caching", "--enable-force-include-usage",
        "--enable-auto-tool-choice", "--tool-call-parser", s.tool_call_parser,
        "--reasoning-parser", s.reasoning_parser, *s.extra_args,
    ]


def speculative_config(s: LaunchSettings) -> str:
    return json.dumps({"method": "draft_model", "model": s.draft, "num_speculative_tokens": s.depth},
                      separators=(",", ":"))


def commands(s: LaunchSettings) -> dict[str, list[str]]:
    """pool name -> argv."""
    spec = [*_common(s, s.spec_port), "--speculative-config", speculative_config(s),
            "--per-request-spec-decode-metrics", "summary"]
    return {"spec-on": spec, "spec-off": _common(s, s.plain_port)}


def gpu_env(s: LaunchSettings) -> dict[str, dict[str, str]]:
    return {"spec-on": {"CUDA_VISIBLE_DEVICES": s.spec_gpus}, "spec-off": {"CUDA_VISIBLE_DEVICES": s.plain_gpus}}

