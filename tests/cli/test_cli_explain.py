"""``draftgate explain`` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DRAFTGATE = [sys.executable, "-m", "draftgate.cli.main"]


def test_explain_json(tmp_path: Path) -> None:
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                   "response_format": {"type": "json_object"}}))
    proc = subprocess.run([*DRAFTGATE, "explain", str(request), "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["w_s"] == 1.0 and set(out["expected_tokens"]) == {"s", "r", "f"}
    assert any("json_object" in r for r in out["reasons"])
    # the decision, as /draftgate/explain gives it: JSON output speculates on the quick-start pools
    assert out["route"] == "spec-on" and out["predicted_saving"] > 0 and set(out["predicted_tau"]) == {"s", "r", "f"}
    assert "break_even_ws" in out and [p["pool"] for p in out["pools"]] == ["spec-on", "spec-off"]
    text = subprocess.run([*DRAFTGATE, "explain", str(request)], capture_output=True, text=True, timeout=60)
    assert "w_S 1.00" in text.stdout and "route: spec-on" in text.stdout and "reasons:" in text.stdout


def test_explain_decides_on_the_configured_pools(tmp_path: Path) -> None:
    """With --config, the decision is the one the proxy so configured would make."""
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"model": "Qwen/Qwen3-32B", "messages": [{"role": "user", "content": "hi"}],
                                   "response_format": {"type": "json_object"}}))
    config = tmp_path / "draftgate.yaml"
    config.write_text(json.dumps({
        "pools": [{"name": "deep", "urls": ["http://deep:8000"], "speculation": {"gamma": 8}},
                  {"name": "plain", "urls": ["http://plain:8000"]}],
        "models": {"Qwen/Qwen3-32B": {"mode": "always_off"}}}))  # JSON is YAML
    proc = subprocess.run([*DRAFTGATE, "explain", str(request), "--json", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["route"] == "plain" and "mode always_off" in out["reasons"]
    broken = tmp_path / "calibration.yaml"
    broken.write_text("kappa: [")
    proc = subprocess.run([*DRAFTGATE, "explain", str(request), "--calibration", str(broken)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "calibration_file" in proc.stderr and "Traceback" not in proc.stderr


def test_explain_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    long_integer = tmp_path / "long.json"
    long_integer.write_text('{"max_tokens": 1' + "0" * 5000 + "}")
    latin1 = tmp_path / "latin1.json"
    latin1.write_bytes('{"messages": [{"role": "user", "content": "café"}]}'.encode("latin-1"))
    for path in (str(bad), str(tmp_path / "missing.json"), str(deep), str(long_integer), str(latin1)):
        proc = subprocess.run([*DRAFTGATE, "explain", path], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_explain_bounds_the_output_by_the_context_given(tmp_path: Path) -> None:
    request = tmp_path / "req.json"
    request.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}))
    proc = subprocess.run([*DRAFTGATE, "explain", str(request), "--json", "--max-model-len", "4096"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert sum(out["expected_tokens"].values()) == 4096 - out["prompt_tokens"]  # ignore_eos runs to the end
    refused = subprocess.run([*DRAFTGATE, "explain", str(request), "--max-model-len", "0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--max-model-len must be a positive" in refused.stderr


def test_an_ngram_pool_is_priced_by_what_the_request_holds_to_copy(tmp_path: Path) -> None:
    """The same ngram pool, two requests: a first question, and a follow-up on code already in the
    conversation; the pool's predicted tau follows what each holds to copy, the draft pool's does not."""
    config = tmp_path / "draftgate.yaml"
    config.write_text(json.dumps({"pools": [
        {"name": "lookup", "urls": ["http://lookup:8000"],
         "speculation": {"method": "ngram", "gamma": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}},
        {"name": "draft", "urls": ["http://draft:8000"], "speculation": {"gamma": 4}}]}))
    code = "```python\n" + "def area(base, height):\n    return base * height / 2\n" * 30 + "```"
    asks = {"first": [{"role": "user", "content": "Write a poem about autumn."}],
            "follow-up": [{"role": "user", "content": f"Review this:\n{code}"},
                          {"role": "assistant", "content": f"It computes a triangle's area:\n{code}"},
                          {"role": "user", "content": "Now rename height to h everywhere."}]}
    taus = {}
    for name, messages in asks.items():
        request = tmp_path / f"{name}.json"
        request.write_text(json.dumps({"model": "Qwen/Qwen3-32B", "messages": messages, "temperature": 0}))
        proc = subprocess.run([*DRAFTGATE, "explain", str(request), "--json", "--config", str(config)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        taus[name] = {p["pool"]: p["tau"]["f"] for p in out["pools"]}
        assert out["copyable"]["code"] is (name == "follow-up")
    assert taus["follow-up"]["lookup"] > 2.5 * taus["first"]["lookup"]
    assert taus["follow-up"]["draft"] == taus["first"]["draft"]
