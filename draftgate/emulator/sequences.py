"""From a checked request to the sequences an engine runs: the prompt as tokens and cache blocks,
the answer the emulated model gives, and what a drafter will get right of it.

Shared by the HTTP server and the evaluation's simulation, so that both run the same requests
the same way. The answer depends on the request and the server's profile alone (on the request's
``seed``, or the server's own draws, when it samples); what a drafter gets right depends also on
the server's speculation settings and seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from draftgate.emulator import wire
from draftgate.emulator.engine import Sequence
from draftgate.emulator.lookup import (
    AnswerCache,
    NgramProposer,
    OwnMatches,
    Proposer,
    SuffixProposer,
    runs_from_each_position,
    suffix_runs,
)
from draftgate.emulator.speculation import PositionModel, position_model
from draftgate.emulator.textgen import Generated, OutputToken, generate, request_digest
from draftgate.emulator.tokens import block_hashes, render_chat_prompt, salted, tokenize
from draftgate.emulator.vllm_request import completion_prompts, runs_without_speculation


@dataclass(frozen=True)
class Prompt:
    """One prompt as the engine sees it: its length and its cache blocks, before any ``cache_salt``."""

    tokens: list[str]
    hashes: list[int]


@dataclass
class Written:
    """One answer's text, before any drafter looks at it: the same on every server with the
    profile, for a greedy request or one with a ``seed``."""

    generated: Generated
    finish_reason: str
    temperature: float
    digest: int
    index: int


@dataclass
class Answer:
    """One choice of a request: its text, and how this server's drafter fares on each token."""

    written: Written
    speculate: bool
    positions: PositionModel

    @property
    def generated(self) -> Generated:
        return self.written.generated


class SequenceMaker:
    """Makes the sequences of requests for one server (``EmulatorConfig``)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.profile = config.profile
        self.rng = random.Random(config.seed)
        self.misalignment = config.profile.drafter(config.spec.method).misalignment if config.spec else 0.0
        self.lookup_drafter = config.spec is not None and config.profile.drafter(config.spec.method).shape is None
        # suffix decoding also copies from the answers this server gave before
        self.answers = AnswerCache() if config.spec is not None and config.spec.method == "suffix" else None

    def sequences(self, body: dict[str, Any], endpoint: str) -> tuple[list[Sequence], list[Generated], int]:
        """``n`` sequences for each prompt, prompt by prompt (a completions ``prompt`` may be a
        batch: strings, or lists of token ids), and the prompt tokens of all of them."""
        seqs: list[Sequence] = []
        gens: list[Generated] = []
        prompt_len = 0
        for one in [{**body, "prompt": p} for p in completion_prompts(body)] if endpoint == "completions" else [body]:
            prompt = self.prompt(one, endpoint)
            salt = one.get("cache_salt")
            hashes = salted(prompt.hashes, salt) if salt is not None else prompt.hashes
            for answer in self.answers_to(one, endpoint, prompt):
                seq = sequence(prompt, hashes, answer)
                seq.detailed = self.config.per_request_metrics == "detailed"
                seqs.append(seq)
                gens.append(answer.generated)
            prompt_len += len(prompt.tokens)
        return seqs, gens, prompt_len

    def prompt(self, body: dict[str, Any], endpoint: str) -> Prompt:
        if endpoint == "chat":
            text = render_chat_prompt(body.get("messages"), body.get("tools"))
        else:
            given = body.get("prompt")
            text = given if isinstance(given, str) else " ".join(str(p) for p in given or ())
        tokens = tokenize(text)
        return Prompt(tokens, block_hashes(tokens, self.profile.block_size))

    def answers_to(self, body: dict[str, Any], endpoint: str, prompt: Prompt) -> list[Answer]:
        """The request's ``n`` answers, drafted as this server drafts."""
        return [self.drafted(body, endpoint, prompt, written) for written in self.written(body, endpoint)]

    def written(self, body: dict[str, Any], endpoint: str) -> list[Written]:
        """The text of the request's ``n`` answers."""
        config = self.config
        temperature = wire.safe_float(body.get("temperature"), self.profile.generation_defaults.get("temperature", 1.0))
        digest = request_digest(body)
        if temperature > 1e-5:
            seed = body.get("seed")
            digest ^= seed if isinstance(seed, int) and not isinstance(seed, bool) else self.rng.getrandbits(64)
        cap = body.get("max_completion_tokens") or body.get("max_tokens")
        out = []
        for index in range(body.get("n", 1)):
            gen = generate(body, self.profile, random.Random(digest if temperature <= 1e-5 else digest + index),
                           endpoint)
            if not gen.tokens:
                gen.tokens.append(OutputToken("", "f", "content"))
            mismatch = config.faults.mismatch_rate
            if config.spec is not None and mismatch and self.rng.random() < mismatch:
                _inject_mismatch(gen)
            truncated = isinstance(cap, int) and len(gen.tokens) > cap
            if truncated:
                del gen.tokens[cap:]
            out.append(Written(gen, wire.finish_reason(gen, truncated), temperature, digest, index))
        return out

    def drafted(self, body: dict[str, Any], endpoint: str, prompt: Prompt, written: Written,
                answers: AnswerCache | None = None, own: OwnMatches | None = None, fresh: bool = False) -> Answer:
        """``written`` as this server's drafter meets it, token by token. For suffix decoding,
        ``answers``: the answers given before on the server the request runs on, when that is not this
        maker's own (a simulated fleet keeps one a replica); ``own``: what the request's own context
        offers, when worked out before (``OwnMatches``); ``fresh``: the request is new to the server
        whatever it was sent before, so nothing is copied from its own earlier answer (a replay draws
        its few hundred requests again and again where real traffic sends new ones)."""
        config = self.config
        speculate = config.spec is not None and not runs_without_speculation(
            body, self.profile.generation_defaults, endpoint, self.profile.speculation_blocked_by)
        tokens = written.generated.tokens
        lookups = (self._lookups(prompt.tokens, [t.text for t in tokens],
                                  answers if answers is not None else self.answers, own, written.digest, fresh)
                   if self.lookup_drafter else None)
        positions = position_model([t.kind for t in tokens], self.profile, written.temperature,
                                   np.random.default_rng([config.seed, written.digest & 0xFFFFFFFF, written.index]),
                                   self.misalignment, lookups)
        return Answer(written, speculate, positions)

    def _lookups(self, prompt: list[str], output: list[str], answers: AnswerCache | None,
                 own: OwnMatches | None, source: int, fresh: bool) -> tuple[list[int], list[int]]:
        """What the lookup drafter proposes and gets right from each output position; a suffix
        drafter also copies from ``answers`` (not from ``source``'s answer when ``fresh``), which then
        holds this one too, as ``source``'s."""
        spec = self.config.spec
        assert spec is not None
        depth = max([spec.num_speculative_tokens, *(k for _, _, k in spec.per_batch_size)])
        suffix = spec.method == "suffix"
        exclude = source if fresh else None
        if suffix and own is not None:
            runs = suffix_runs(prompt, output, depth, own, answers, exclude)
        else:
            proposer: Proposer = (SuffixProposer(prompt, answers, exclude) if suffix
                                  else NgramProposer(prompt, spec.lookup_min, spec.lookup_max))
            runs = runs_from_each_position(proposer, output, depth)
        if suffix and answers is not None:
            answers.add(output, source)
        return runs


def sequence(prompt: Prompt, hashes: list[int], answer: Answer) -> Sequence:
    """A fresh sequence of ``answer`` to ``prompt`` (cache blocks ``hashes``), to submit to an engine."""
    written = answer.written
    return Sequence(len(prompt.tokens), hashes, written.generated.tokens, written.finish_reason, written.temperature,
                    answer.speculate, answer.positions)


def _inject_mismatch(gen: Generated) -> None:
    for tok in gen.tokens:
        if tok.channel in ("content", "reasoning"):
            tok.text = tok.text + "~"
            return
    if gen.calls:
        gen.calls[0].name += "_"
        for tok in gen.tokens:
            if tok.channel == "tool_name":
                tok.text = gen.calls[0].name
                return
