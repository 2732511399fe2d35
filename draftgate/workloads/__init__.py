"""Workload data (committed, attributed in BFCL_NOTICE.md and SHAREGPT_NOTICE.md) and the loaders for it."""

from pathlib import Path

HERE = Path(__file__).parent
BFCL_SAMPLE = HERE / "bfcl_sample.jsonl"  # 180 BFCL requests with their ground truth
BFCL_SESSIONS = HERE / "bfcl_sessions.jsonl"  # the 170 other BFCL multi-turn entries, naming their tools' classes
BFCL_SESSION_TOOLS = HERE / "bfcl_session_tools.jsonl"  # each of those classes' tools
SHAREGPT_SAMPLE = HERE / "sharegpt_sample.jsonl"  # 1,000 ShareGPT V3 first turns with their answers' lengths
SHAREGPT_TURNS = HERE / "sharegpt_turns.jsonl"  # 90 ShareGPT V3 conversations, two or three turns, real answers
ARMS = HERE / "arms"  # the four-arm protocol's workloads, arm_<A-D>.jsonl
