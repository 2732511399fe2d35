"""Estimate, before a request runs, how its output splits into S, R and F.

Every signal the request carries is read (docs/model.md lists them): tools
and tool_choice, response_format, vLLM's structured_outputs, the dead legacy
guided_* fields, thinking switches, sampling settings, caps and the
conversation so far. Anything a client can send yields an estimate: what
cannot be understood is ignored and named in the reasons, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from draftgate.policy.copying import CopySources
from draftgate.policy.structure.constraints import (
    legacy_guided_fields,
    named_function,
    structured_constraint,
)
from draftgate.policy.structure.estimates import (
    ClassTokens,
    StructureEstimate,
    outputs_of,
)
from draftgate.policy.structure.families import family_of
from draftgate.policy.structure.length import bounded
from draftgate.policy.structure.priors import DEFAULT_PRIORS, StructurePriors
from draftgate.policy.structure.relevance import question_unrelated
from draftgate.policy.structure.sampling import (
    SamplingDefaults,
    effective,
    speculation_blockers,
)
from draftgate.policy.structure.schema_length import (
    NO_PARAMETERS,
    SchemaWalk,
    expected_json_chars,
)
from draftgate.policy.vllm_fields import as_bool, as_int, prompts_of

Endpoint = Literal["chat", "completions"]
# a call's JSON beyond its name and arguments: as a model writes it unforced,
# {"name": "", "arguments": }; as vLLM's grammar for tool_choice=required writes it,
# {"name": "", "parameters": } and the comma after it
_NATIVE_CALL_CHARS = 26.0
_FORCED_CALL_CHARS = 30.0
_THINKING_FIELDS = ("chat_template_kwargs", "reasoning_effort", "enable_thinking", "include_reasoning")
_EFFORTS = {"low", "medium", "high"}
_NO_THINKING_EFFORTS = {"none", "minimal"}


@dataclass(frozen=True, slots=True)
class _Conversation:
    """What the estimate asks of the messages, read in one pass."""

    after_tool: bool = False  # the last message is a tool result
    agent_called: bool = False  # an assistant turn among the last _RECENT_TURNS called tools
    question: str | None = None  # the last user message's text
    chars: int = 0  # the prompt's characters, as the template would lay them out
    copyable: CopySources = CopySources()  # what an answer could copy from


_RECENT_TURNS = 64
_CALL_CHARS = 80  # a tool call in the history, in the prompt
_MESSAGE_CHARS = 12  # a message's role and the template's tags around it


@dataclass(slots=True)
class _Draft:
    """Accumulates the estimate while the signals are read."""

    priors: StructurePriors
    reasons: list[str] = field(default_factory=list)
    schema_tokens: float = 0.0
    prose_tokens: float = 0.0
    reasoning_tokens: float = 0.0
    p_call: float = 0.0
    call_wrapper_tokens: float = 0.0  # the tags around an unforced call, in the model's own format
    # under tool_choice auto, the two outcomes the expectation mixes: a call's tokens
    # (S, and prose before it) and a plain answer's (F); None when the shape is fixed
    call_tokens: tuple[float, float] | None = None
    answer_tokens: float = 0.0
    constrained: bool = False
    thinking: bool = False
    reasoning_hidden: bool = False

    def note(self, reason: str) -> None:
        if len(self.reasons) < 32:
            self.reasons.append(reason)


def estimate(
    body: Any,
    *,
    priors: StructurePriors = DEFAULT_PRIORS,
    defaults: SamplingDefaults | None = None,
    endpoint: Endpoint = "chat",
    context_tokens: float | None = None,
) -> StructureEstimate:
    """Estimate the S/R/F split of the output ``body`` asks for; never raises.

    ``defaults``: the pools' sampling defaults as configured; unset, those of the model's
    family (``families.py``). ``context_tokens``: the model's ``max_model_len`` when the
    pools have said it, which bounds the output as vLLM does when the request sets no lower cap.
    """
    draft = _Draft(priors)
    if not isinstance(body, dict):
        body = {}
        draft.note("request body is not a JSON object: estimated as prose")
    family = family_of(body.get("model"))
    defaults = defaults or family.sampling
    wrapper = priors.tool_call_wrapper_tokens
    draft.call_wrapper_tokens = family.tool_call_wrapper_tokens if wrapper is None else wrapper
    conversation = _read_conversation(body.get("messages")) if endpoint == "chat" else _Conversation()
    thinks = family.thinks_by_default if priors.thinking_by_default is None else priors.thinking_by_default
    if thinks or any(name in body for name in _THINKING_FIELDS):
        _read_thinking(body, draft, thinks)
    if not _read_output_format(body, draft):
        if endpoint == "chat":
            _read_tools(body, draft, conversation)
        else:
            draft.prose_tokens = priors.prose_tokens
            draft.note("completions request: a raw prompt is answered in prose")
    _read_legacy(body, draft)
    given = body.get("temperature")
    temperature, from_default = effective(body, "temperature", defaults)
    if given is None:
        draft.note(f"temperature omitted: pool default {temperature:g} applies")
    elif from_default:
        draft.note(f"temperature {str(given)[:24]!r} is not a finite number: pool default {temperature:g} assumed")
    n = body.get("n")
    n = 1 if n is None else max(as_int(n) or 1, 1)
    if n > 1:
        draft.note(f"n={n}: per-request speculation metrics are unavailable; plain pool preferred")
    blockers = speculation_blockers(body, defaults, endpoint, priors.speculation_blocked_by)
    for blocker in blockers:
        draft.note(f"{blocker}: vLLM will not speculate on this request")
    prompt_tokens = _prompt_tokens(body, endpoint, priors, conversation.chars)
    prompts = len(prompts_of(body)) if endpoint == "completions" else 1
    sequences = outputs_of(n, prompts)
    if prompts > 1:
        draft.note(f"a batch of {prompts} prompts: {sequences} outputs")
    room = None if context_tokens is None else context_tokens - prompt_tokens / prompts
    (s_tokens, r_tokens, f_tokens), bounds = bounded(
        body, (draft.schema_tokens * sequences, draft.reasoning_tokens * sequences, draft.prose_tokens * sequences),
        room, sequences)
    for note in bounds:
        draft.note(note)
    total = s_tokens + r_tokens + f_tokens
    if total <= 0:
        w_s, w_r, w_f = 0.0, 0.0, 1.0
    else:
        w_s, w_r = s_tokens / total, r_tokens / total
        w_f = max(0.0, 1.0 - w_s - w_r)
    if draft.call_tokens is not None and not draft.constrained:
        if_call = ClassTokens(draft.call_tokens[0], draft.reasoning_tokens, draft.call_tokens[1])
        if_answer = ClassTokens(0.0, draft.reasoning_tokens, draft.answer_tokens)
    else:
        if_call = if_answer = ClassTokens(draft.schema_tokens, draft.reasoning_tokens, draft.prose_tokens)
    return StructureEstimate(
        w_s=w_s, w_r=w_r, w_f=w_f, expected_tokens=ClassTokens(s_tokens, r_tokens, f_tokens),
        reasons=tuple(draft.reasons), temperature=temperature, temperature_from_default=from_default, n=n,
        speculation_blockers=tuple(blockers), p_tool_call=draft.p_call, prompt_tokens=prompt_tokens,
        constrained=draft.constrained, thinking=draft.thinking, prompts=prompts,
        reasoning_hidden=draft.reasoning_hidden, if_call=if_call, if_answer=if_answer, copyable=conversation.copyable,
    )


# ------------------------------------------------------------------ signals


def _read_thinking(body: dict[str, Any], draft: _Draft, thinks_by_default: bool) -> None:
    p = draft.priors
    kwargs = body.get("chat_template_kwargs")
    switch: bool | None = None
    if isinstance(kwargs, dict):
        for alias in ("enable_thinking", "thinking"):
            value = kwargs.get(alias)
            if isinstance(value, bool):
                switch = value
                draft.note(f"chat_template_kwargs.{alias}={str(value).lower()}")
                break
    elif kwargs is not None:
        draft.note("chat_template_kwargs is not an object: ignored")
    effort = body.get("reasoning_effort")
    if isinstance(effort, str) and effort in _NO_THINKING_EFFORTS and switch is None:
        switch = False
        draft.note(f"reasoning_effort={effort}: no reasoning expected")
    if switch is None and isinstance(effort, str) and effort in _EFFORTS:
        switch = True
    if "enable_thinking" in body and isinstance(body.get("enable_thinking"), bool):
        draft.note("top-level enable_thinking is not read by vLLM (use chat_template_kwargs): ignored")
    thinking = thinks_by_default if switch is None else switch
    if switch is None and thinking:
        draft.note("no thinking switch: the model thinks by default (enable_thinking: false turns it off)")
    if not thinking:
        return
    draft.thinking = True
    if isinstance(effort, str) and effort in _EFFORTS:
        tokens = getattr(p, f"reasoning_tokens_{effort}")
        draft.note(f"reasoning_effort={effort}: ~{tokens:.0f} reasoning tokens expected")
    else:
        tokens = p.reasoning_tokens_default
        draft.note(f"thinking on: ~{tokens:.0f} reasoning tokens expected")
    if as_bool(body.get("include_reasoning")) is False:
        draft.reasoning_hidden = True
        draft.note("include_reasoning=false hides the reasoning but the model still generates it")
    draft.reasoning_tokens = tokens


def _read_output_format(body: dict[str, Any], draft: _Draft) -> bool:
    """JSON formats and structured outputs; True when they decide the answer's shape."""
    p = draft.priors
    structured = body.get("structured_outputs")
    if isinstance(structured, dict):
        constraint = structured_constraint(structured)
        if constraint is not None:
            kind, value = constraint
            draft.constrained = True
            if kind == "json":
                schema = value if isinstance(value, dict) else {}
                if isinstance(value, str):
                    draft.note("structured_outputs.json given as a string: sized from priors")
                draft.schema_tokens = _schema_tokens(schema, draft)
            elif kind == "json_object":
                draft.schema_tokens = p.json_object_tokens
            elif kind == "choice" and isinstance(value, list) and value:
                longest = max(len(str(v)) for v in value[:256])
                draft.schema_tokens = max(1.0, longest / p.text_chars_per_token)
            elif kind == "regex":
                draft.schema_tokens = p.regex_tokens
            else:
                draft.schema_tokens = p.grammar_tokens
            draft.note(f"structured_outputs.{kind}: the answer is schema-bound (~{draft.schema_tokens:.0f} tokens)")
            return True
        draft.note("structured_outputs sets none of json, regex, choice, grammar, json_object and "
                   "structural_tag: vLLM refuses it")
    elif structured is not None:
        draft.note("structured_outputs is not an object: ignored")
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                draft.note("response_format json_schema without a schema object: sized from priors")
                schema = {}
            draft.constrained = True
            draft.schema_tokens = _schema_tokens(schema, draft) if schema else p.json_object_tokens
            draft.note(f"response_format=json_schema: content is schema-bound (~{draft.schema_tokens:.0f} tokens)")
            return True
        if kind == "json_object":
            draft.constrained = True
            draft.schema_tokens = p.json_object_tokens
            draft.note(f"response_format=json_object: content is JSON (~{p.json_object_tokens:.0f} tokens, prior)")
            return True
        if kind == "structural_tag":
            draft.constrained = True
            draft.schema_tokens = p.grammar_tokens
            draft.note("response_format=structural_tag: tagged spans are schema-bound")
            return True
        if kind not in (None, "text"):
            draft.note(f"response_format type {str(kind)[:40]!r} not understood: ignored")
    elif fmt is not None:
        draft.note("response_format is not an object: ignored")
    return False


def _read_tools(body: dict[str, Any], draft: _Draft, conversation: _Conversation) -> None:
    p = draft.priors
    tools = body.get("tools")
    after_tool, agent_called, question = conversation.after_tool, conversation.agent_called, conversation.question
    prose = p.prose_after_tool_tokens if after_tool else p.prose_tokens
    if tools is None or tools == []:
        draft.prose_tokens = prose
        draft.note("no tools and no JSON format: prose" + (" answering a tool result" if after_tool else ""))
        return
    if not isinstance(tools, list):
        draft.prose_tokens = prose
        draft.note("tools is not a list: ignored, estimated as prose")
        return
    arguments = _argument_chars(tools, draft)
    call_chars = sum(len(tool_name) + chars for tool_name, chars in arguments.items())
    if not arguments:
        draft.prose_tokens = prose
        draft.note("no usable tool definitions (each needs function.name): estimated as prose")
        return
    choice = body.get("tool_choice", "auto")
    parallel = as_bool(body.get("parallel_tool_calls")) is not False
    calls = 1.0 + (p.extra_parallel_calls if parallel else 0.0)
    per_token = p.json_chars_per_token
    # the name and arguments of a call, on average over the tools offered
    mean_chars = call_chars / len(arguments)
    if choice == "none":
        draft.prose_tokens = prose
        draft.note("tool_choice=none: tools are offered but not callable, prose")
        return
    if isinstance(choice, dict):
        name = named_function(choice)
        if name is not None and name in arguments:
            draft.constrained = True
            draft.p_call = 1.0
            # vLLM's grammar is the function's parameters: the name is the server's to add
            draft.schema_tokens = max(1.0, arguments[name] / per_token)
            draft.note(f"tool_choice names {name[:60]!r}: the output is that call's arguments alone "
                       f"(~{draft.schema_tokens:.0f} tokens)")
            return
        draft.note("tool_choice names a function that is not in tools: treated as auto")
        choice = "auto"
    if choice == "required":
        draft.constrained = True
        draft.p_call = 1.0
        # vLLM's grammar writes [{"name": ..., "parameters": ...}, ...]: bare JSON, no parser tags
        draft.schema_tokens = (calls * (mean_chars + _FORCED_CALL_CHARS) + 2.0) / per_token
        extra = " (parallel calls allowed)" if parallel else ""
        draft.note(f"tool_choice=required: whole output is tool calls, ~{draft.schema_tokens:.0f} tokens{extra}")
        return
    if choice != "auto":
        draft.note(f"tool_choice {str(choice)[:40]!r} not understood: treated as auto")
    p_call = p.p_call_after_tool if after_tool else p.p_call_auto
    unrelated = not after_tool and question_unrelated(question, tools)
    if unrelated:
        p_call = p.p_call_unrelated
        draft.note("the user's words share none with the tools' names and descriptions: a call is unlikely")
    if agent_called:
        p_call = min(1.0, p_call + p.p_call_agent_bonus)
    draft.p_call = p_call
    # unforced, the model writes its own format: the call's JSON inside the parser's tags
    mean_call = (mean_chars + _NATIVE_CALL_CHARS) / per_token + draft.call_wrapper_tokens
    draft.call_tokens = (calls * mean_call, p.preamble_tokens_with_call)
    draft.answer_tokens = prose
    draft.schema_tokens = p_call * calls * mean_call
    draft.prose_tokens = (1.0 - p_call) * prose + p_call * p.preamble_tokens_with_call
    context = "after a tool result" if after_tool else "fresh user turn"
    history = ", earlier turns called tools" if agent_called else ""
    draft.note(f"tool_choice=auto with {len(arguments)} tools ({context}{history}): p(call)={p_call:.2f}")


def _read_legacy(body: dict[str, Any], draft: _Draft) -> None:
    present = legacy_guided_fields(body)
    if not present:
        return
    if not draft.priors.legacy_guided_fields_honoured:
        draft.note(
            f"{', '.join(present)}: removed in vLLM 0.12 and silently ignored, output is unconstrained"
        )
        return
    if draft.constrained:
        return
    draft.constrained = True
    field_name = present[0]
    value = body[field_name]
    if field_name == "guided_json":
        draft.schema_tokens = _schema_tokens(value if isinstance(value, dict) else {}, draft)
    elif field_name == "guided_choice" and isinstance(value, list) and value:
        draft.schema_tokens = max(len(str(v)) for v in value[:256]) / draft.priors.text_chars_per_token
    elif field_name == "guided_regex":
        draft.schema_tokens = draft.priors.regex_tokens
    else:
        draft.schema_tokens = draft.priors.grammar_tokens
    draft.prose_tokens = 0.0
    draft.p_call = 0.0
    draft.note(f"{field_name}: honoured by this pool (declared vLLM < 0.12), schema-bound")


# ------------------------------------------------------------------ helpers


def _argument_chars(tools: list[Any], draft: _Draft) -> dict[str, float]:
    """Each usable tool's expected arguments, in characters of JSON, by name."""
    p = draft.priors
    chars: dict[str, float] = {}
    skipped = 0
    walk: SchemaWalk | None = None
    for tool in tools[: p.max_tools]:
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            skipped += 1
            continue
        params = fn.get("parameters", NO_PARAMETERS)
        if not isinstance(params, dict):
            draft.note(f"tool {name[:60]!r}: parameters is not an object, sized from priors")
            params = {}
        walk = walk or SchemaWalk(p, None)
        walk.reset(params)
        chars[name] = walk.chars(params)
        if walk.notes:
            for n in sorted(walk.notes):
                draft.note(f"tool {name[:60]!r}: {n}")
            walk.notes.clear()
    if skipped:
        draft.note(f"{skipped} tool(s) without function.name ignored")
    if len(tools) > p.max_tools:
        draft.note(f"{len(tools)} tools: only the first {p.max_tools} sized")
    return chars


def _schema_tokens(schema: dict[str, Any], draft: _Draft) -> float:
    chars, notes = expected_json_chars(schema, draft.priors)
    for n in sorted(notes):
        draft.note(n)
    return max(1.0, chars / draft.priors.json_chars_per_token)


def _read_conversation(messages: Any) -> _Conversation:
    """The messages read once, for everything the estimate asks of them."""
    if not isinstance(messages, list) or not messages:
        return _Conversation()
    chars = text_chars = earlier_calls = 0
    code = False
    agent_called = False
    question = None
    recent = len(messages) - _RECENT_TURNS
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        content = m.get("content")
        if isinstance(content, str):
            text_chars += len(content)
            code = code or "```" in content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    text = str(part.get("text", ""))
                    text_chars += len(text)
                    code = code or "```" in text
        calls = m.get("tool_calls")
        if isinstance(calls, list):
            chars += _CALL_CHARS * len(calls)
            earlier_calls += len(calls)
        chars += _MESSAGE_CHARS
        if role == "user":
            question = content
        elif role == "assistant" and calls and i >= recent:
            agent_called = True
    last = messages[-1]
    after_tool = isinstance(last, dict) and last.get("role") in ("tool", "function")
    return _Conversation(after_tool, agent_called, question if isinstance(question, str) and question else None,
                         chars + text_chars, CopySources(text_chars, code, earlier_calls))


def _prompt_tokens(body: dict[str, Any], endpoint: Endpoint, priors: StructurePriors, message_chars: int) -> float:
    """A cheap size of the prompt: characters over a ratio, never a tokenizer; token ids as they are.
    ``message_chars``: a chat request's messages, as ``_read_conversation`` sized them."""
    chars = ids = 0
    if endpoint == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            chars = len(prompt)
        elif isinstance(prompt, list):
            for part in prompt[:100_000]:
                if isinstance(part, str):
                    chars += len(part)
                elif isinstance(part, list):  # a tokenized prompt of a batch
                    ids += len(part)
                else:
                    ids += 1
    else:
        chars = message_chars
    tools = body.get("tools")
    if isinstance(tools, list):
        chars += 300 * (len(tools) if len(tools) < priors.max_tools else priors.max_tools)
    return chars / priors.text_chars_per_token + ids
