"""Workload data (committed, attributed in BFCL_NOTICE.md) and the loaders for it."""

from pathlib import Path

HERE = Path(__file__).parent
BFCL_SAMPLE = HERE / "bfcl_sample.jsonl"  # 180 BFCL requests with their ground truth
ARMS = HERE / "arms"  # the four-arm protocol's workloads, arm_<A-D>.jsonl
