"""A deterministic stand-in tokenizer: word pieces, about four characters each.

The emulator needs token counts and token prefixes (for its prefix cache), not
a real vocabulary; a regex split that keeps leading spaces with words behaves
like a BPE tokenizer closely enough for both.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

VOCAB_SIZE = 151_936  # Qwen3's
_PIECE = re.compile(r" ?[A-Za-z]{1,6}| ?\d{1,3}| ?[^\sA-Za-z\d]|\s+")


def tokenize(text: str) -> list[str]:
    return _PIECE.findall(text)


def token_id(piece: str) -> int:
    """A stable id for a piece, within Qwen3's vocabulary size: there is no real vocabulary."""
    return zlib.crc32(piece.encode("utf-8", "replace")) % VOCAB_SIZE


def render_chat_prompt(messages: Any, tools: Any) -> str:
    """A Qwen-style chat template: what the prefix cache keys on."""
    parts: list[str] = []
    if isinstance(tools, list) and tools:
        import json

        parts.append("<|im_start|>system\n# Tools\n" + json.dumps(tools, sort_keys=True) + "<|im_end|>\n")
    if isinstance(messages, list):
        for m in messages:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            text = content if isinstance(content, str) else ""
            calls = m.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    fn = call.get("function", {}) if isinstance(call, dict) else {}
                    text += f"<tool_call>{fn.get('name')} {fn.get('arguments')}</tool_call>"
            parts.append(f"<|im_start|>{m.get('role')}\n{text}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def block_hashes(tokens: list[str], block_size: int) -> list[int]:
    """Chained hashes of full blocks: equal prefixes give equal leading hashes."""
    hashes: list[int] = []
    previous = 0
    for start in range(0, len(tokens) - block_size + 1, block_size):
        previous = hash((previous, tuple(tokens[start : start + block_size])))
        hashes.append(previous)
    return hashes


def salted(hashes: list[int], salt: str) -> list[int]:
    """The blocks of a prompt under a ``cache_salt``: prompts alike under two salts share no block,
    under one salt their equal prefixes still do (vLLM mixes the salt into the first block's hash,
    which every later hash chains on)."""
    key = hash(("cache_salt", salt))
    return [hash((key, h)) for h in hashes]
