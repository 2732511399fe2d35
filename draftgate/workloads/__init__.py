"""Workload data (committed, attributed in BFCL_NOTICE.md and SHAREGPT_NOTICE.md) and the loaders for it."""

from pathlib import Path

HERE = Path(__file__).parent
BFCL_SAMPLE = HERE / "bfcl_sample.jsonl"  # 180 BFCL requests with their ground truth
SHAREGPT_SAMPLE = HERE / "sharegpt_sample.jsonl"  # 320 ShareGPT V3 first turns with their answers' lengths
SHAREGPT_TURNS = HERE / "sharegpt_turns.jsonl"  # 90 ShareGPT V3 conversations, two or three turns, real answers
ARMS = HERE / "arms"  # the four-arm protocol's workloads, arm_<A-D>.jsonl
