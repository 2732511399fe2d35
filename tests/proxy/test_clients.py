"""The agent clients people point at the proxy, from the registry, against emulated
pools: the openai client on Chat Completions and Responses, the OpenAI Agents SDK
with both its model kinds, LangChain's ChatOpenAI with bound tools, and the
anthropic client with tools and with thinking; streamed and not. Each request is
gated (the route header names the pool the gate chose), its answer parses in the
client's own types, and it is counted on the metrics under its endpoint."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.proxy_harness import Stack, stack, wait_until

MODEL = "Qwen/Qwen3-32B"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}

set_tracing_disabled(True)  # the Agents SDK would otherwise export traces to OpenAI


class Routes:
    """The x-draftgate-route of every answer a client received, in order."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def record(self, response: Any) -> None:
        self.seen.append(response.headers.get("x-draftgate-route"))

    async def record_async(self, response: Any) -> None:
        self.record(response)


@pytest.fixture(scope="module")
def pools() -> Iterator[Stack]:
    with stack(31) as s:
        yield s


def counted(s: Stack, endpoint: str, before: float, n: int = 1) -> bool:
    return wait_until(lambda: s.metric("draftgate_requests_total", endpoint=endpoint, status="200") >= before + n)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_openai_chat_completions(pools: Stack, streamed: bool) -> None:
    before = pools.metric("draftgate_requests_total", endpoint="chat", status="200")
    raw = pools.client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "weather in Paris?"}], tools=[WEATHER],
        tool_choice="required", stream=streamed)
    assert raw.headers["x-draftgate-route"] == "spec-on"
    if streamed:
        chunks = list(raw.parse())
        assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
        arguments = "".join(c.choices[0].delta.tool_calls[0].function.arguments or "" for c in chunks
                            if c.choices and c.choices[0].delta.tool_calls)
    else:
        arguments = raw.parse().choices[0].message.tool_calls[0].function.arguments
    assert isinstance(json.loads(arguments)["city"], str)
    assert counted(pools, "chat", before)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_openai_responses(pools: Stack, streamed: bool) -> None:
    before = pools.metric("draftgate_requests_total", endpoint="responses", status="200")
    tool = {"type": "function", **WEATHER["function"]}
    raw = pools.client.responses.with_raw_response.create(model=MODEL, input="weather in Paris?", tools=[tool],
                                                          tool_choice="required", stream=streamed)
    assert raw.headers["x-draftgate-route"] == "spec-on"
    if streamed:
        response = [e for e in raw.parse() if e.type == "response.completed"][0].response
    else:
        response = raw.parse()
    assert isinstance(response, openai.types.responses.Response)
    assert response.output[0].type == "function_call" and json.loads(response.output[0].arguments)["city"]
    assert counted(pools, "responses", before)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("kind", ["responses", "chat"])
@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_openai_agents_sdk_runs_a_tool_through_the_gate(pools: Stack, kind: str, streamed: bool) -> None:
    """The SDK's default model kind is the Responses API's; both are gated."""
    routes = Routes()
    endpoint = "responses" if kind == "responses" else "chat"
    before = pools.metric("draftgate_requests_total", endpoint=endpoint, status="200")

    async def run() -> Any:
        http = httpx.AsyncClient(event_hooks={"response": [routes.record_async]})
        api = openai.AsyncOpenAI(base_url=f"{pools.proxy.url}/v1", api_key="none", http_client=http, max_retries=0)
        model_kind = OpenAIResponsesModel if kind == "responses" else OpenAIChatCompletionsModel
        agent = Agent(name="forecaster", instructions="Answer with the weather tool.", tools=[get_weather],
                      model=model_kind(model=MODEL, openai_client=api),
                      model_settings=ModelSettings(tool_choice="required"), tool_use_behavior="stop_on_first_tool")
        try:
            if not streamed:
                return (await Runner.run(agent, "weather in Paris?")).final_output
            result = Runner.run_streamed(agent, "weather in Paris?")
            async for _ in result.stream_events():
                pass
            return result.final_output
        finally:
            await http.aclose()

    assert asyncio.run(run()).startswith("sunny in ")
    assert routes.seen == ["spec-on"]
    assert counted(pools, endpoint, before)


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_langchain_chat_openai_with_bound_tools(pools: Stack, streamed: bool) -> None:
    routes = Routes()
    before = pools.metric("draftgate_requests_total", endpoint="chat", status="200")
    with httpx.Client(event_hooks={"response": [routes.record]}) as http:
        llm = ChatOpenAI(model=MODEL, base_url=f"{pools.proxy.url}/v1", api_key="none", http_client=http,
                         max_retries=0).bind_tools([weather], tool_choice="required")
        if streamed:
            message: AIMessage = None  # type: ignore[assignment]
            for chunk in llm.stream("weather in Paris?"):
                assert isinstance(chunk, AIMessageChunk)
                message = chunk if message is None else message + chunk
        else:
            message = llm.invoke("weather in Paris?")
    assert isinstance(message, AIMessage)
    assert message.tool_calls[0]["name"] == "weather" and isinstance(message.tool_calls[0]["args"]["city"], str)
    assert routes.seen == ["spec-on"]
    assert counted(pools, "chat", before)


def anthropic_answer(pools: Stack, request: dict[str, Any], streamed: bool) -> tuple[anthropic.types.Message, Routes]:
    """The anthropic client's answer to ``request`` through the proxy (its stream's final
    message, when ``streamed``), and the routes it was told."""
    routes = Routes()
    with httpx2.Client(event_hooks={"response": [routes.record]}) as http:
        client = anthropic.Anthropic(base_url=pools.proxy.url, api_key="none", http_client=http, max_retries=0)
        if not streamed:
            return client.messages.create(**request), routes
        with client.messages.stream(**request) as stream:
            return stream.get_final_message(), routes


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_anthropic_with_tools(pools: Stack, streamed: bool) -> None:
    before = pools.metric("draftgate_requests_total", endpoint="messages", status="200")
    request: dict[str, Any] = dict(
        model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[{"name": "get_weather", "description": "the weather in a city",
                "input_schema": WEATHER["function"]["parameters"]}], tool_choice={"type": "any"})
    message, routes = anthropic_answer(pools, request, streamed)
    assert isinstance(message, anthropic.types.Message) and message.stop_reason == "tool_use"
    block = message.content[0]
    assert isinstance(block, anthropic.types.ToolUseBlock) and isinstance(block.input["city"], str)
    assert routes.seen == ["spec-on"]
    assert counted(pools, "messages", before)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_anthropic_with_thinking(pools: Stack, streamed: bool) -> None:
    """vLLM thinks as the chat template says (``chat_template_kwargs``), not as ``thinking`` says;
    a client sends both, and gets the reasoning as a thinking block."""
    before = pools.metric("draftgate_requests_total", endpoint="messages", status="200")
    request: dict[str, Any] = dict(
        model=MODEL, max_tokens=120, messages=[{"role": "user", "content": "is 97 prime?"}],
        thinking={"type": "enabled", "budget_tokens": 1024},
        extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    message, routes = anthropic_answer(pools, request, streamed)
    assert isinstance(message.content[0], anthropic.types.ThinkingBlock) and message.content[0].thinking
    assert routes.seen and routes.seen[0] in ("spec-on", "spec-off")
    assert counted(pools, "messages", before)
    assert wait_until(lambda: pools.metric("draftgate_output_tokens_total", token_class="r") > 0)
