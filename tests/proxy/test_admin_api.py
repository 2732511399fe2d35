"""The proxy's own endpoints are documented at /draftgate/openapi.json, and what
they answer is what the document says."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from tests.proxy_harness import Stack, stack

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def s() -> Iterator[Stack]:
    with stack(5) as st:
        yield st


@pytest.fixture(scope="module")
def document(s: Stack) -> dict[str, Any]:
    response = httpx.get(f"{s.proxy.url}/draftgate/openapi.json")
    assert response.status_code == 200
    return response.json()


def answer_schema(document: dict[str, Any], path: str, method: str, status: str) -> dict[str, Any]:
    """The schema of one answer, with the document's components, for jsonschema to resolve."""
    content = document["paths"][path][method]["responses"][status]["content"]["application/json"]
    return {**content["schema"], "components": document["components"]}


def test_the_document_covers_the_proxys_own_endpoints_and_not_vllms(document: dict[str, Any]) -> None:
    assert set(document["paths"]) == {"/health", "/ready", "/metrics", "/draftgate/explain", "/draftgate/reload"}
    explain = document["paths"]["/draftgate/explain"]["post"]
    assert explain["requestBody"]["required"] is True
    assert "400" in explain["responses"] and "401" in explain["responses"]


@pytest.mark.parametrize("body", [
    {"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [TOOL],
     "tool_choice": "required"},
    {"model": "Qwen/Qwen3-32B", "prompt": "Once upon a time"},
    {"model": "Qwen/Qwen3-32B", "input": "Tell me a story", "reasoning": {"effort": "high"}},
], ids=["chat", "completions", "responses"])
def test_an_explanation_is_what_the_document_says(s: Stack, document: dict[str, Any], body: dict[str, Any]) -> None:
    response = httpx.post(f"{s.proxy.url}/draftgate/explain", json=body)
    assert response.status_code == 200
    jsonschema.validate(response.json(), answer_schema(document, "/draftgate/explain", "post", "200"))


def test_errors_and_readiness_are_what_the_document_says(s: Stack, document: dict[str, Any]) -> None:
    bad = httpx.post(f"{s.proxy.url}/draftgate/explain", content=b"[1, 2]")
    assert bad.status_code == 400
    jsonschema.validate(bad.json(), answer_schema(document, "/draftgate/explain", "post", "400"))
    ready = httpx.get(f"{s.proxy.url}/ready")
    assert ready.status_code == 200
    jsonschema.validate(ready.json(), answer_schema(document, "/ready", "get", "200"))


def test_the_page_documenting_them_is_served(s: Stack) -> None:
    page = httpx.get(f"{s.proxy.url}/draftgate/docs")
    assert page.status_code == 200 and "/draftgate/openapi.json" in page.text
