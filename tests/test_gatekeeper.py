"""The proxy's plan for any request-shaped JSON: never an exception, always a pool, strict JSON out."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.gatekeeper import Gatekeeper
from tests.proxy_harness import proxy_settings
from tests.test_structure import json_values, request_keys

GATEKEEPER = Gatekeeper(proxy_settings("http://127.0.0.1:1", "http://127.0.0.1:2"))
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(request_keys | st.sampled_from(["top_p", "presence_penalty", "n", "model", "seed"]),
                       json_values, max_size=8),
       st.sampled_from(["chat", "completions"]))
def test_any_request_gets_a_plan_that_explains_itself_in_strict_json(fields: dict[str, Any], endpoint: str) -> None:
    body = {"messages": USER, "prompt": "Paris", **fields}
    plan = GATEKEEPER.plan(body, endpoint)
    assert plan.route in {"spec-on", "spec-off"} and sorted(plan.order) == ["spec-off", "spec-on"]
    json.dumps(plan.explain(), allow_nan=False)  # what /draftgate/explain sends
    for value in plan.headers().values():
        value.encode("latin-1")  # what every response carries
