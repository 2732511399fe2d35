"""``draftgate simulate`` and the physics under it: GPUs, targets and tensor parallelism as data,
the mechanisms that shrink speculation's gain, and one clear line for every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.emulator_vs_published import GEMM_TFLOPS
from draftgate.cli.main import main
from draftgate.emulator.physics import Physics, Work, gemm_seconds
from draftgate.emulator.profile import EngineProfile

EAGLE = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'
SMALL = ["--gpu", "H100", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--prompt-tokens", "400-600",
         "--output-tokens", "150:40"]


def _simulate(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", *SMALL, "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args, message", [
    (["--gpu", "A99"], "unknown GPU 'A99'"),
    (["--model", "acme/Nope-7B"], "unknown model 'acme/Nope-7B'"),
    (["--gpu", "H100", "--model", "meta-llama/Llama-3.1-70B-Instruct"], "too little to serve"),
    (["--tensor-parallel-size", "3"], "tensor_parallel_size must be 1, 2, 4 or 8"),
    (["--prompt-tokens", "lots"], "--prompt-tokens 'lots' is not MEAN:SD, LO-HI"),
    (["--output-tokens", "90-10"], "--output-tokens '90-10': LO-HI needs"),
    (["--rates", "1,fast"], "--rates '1,fast'"),
    (["--rates", "0"], "positive"),
    (["--temperature", "-1"], "--temperature must be between 0 and 2"),
    (["--speculative-config", '{"method": "eagle3"}'], "num_speculative_tokens"),
    (["--speculative-config", '{"method": "eagle3", "model": "acme/head", "num_speculative_tokens": 3}'],
     "unknown model 'acme/head'"),
    (["--profile", "/nonexistent/profile.yaml"], "--profile /nonexistent/profile.yaml"),
])
def test_bad_input_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_ladder_is_deterministic_per_seed_and_shaped_as_benchmarks_report(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--rates", "2,8", "--duration", "30", "--speculative-config", EAGLE]
    first, again = _simulate(capsys, *args), _simulate(capsys, *args)
    assert first == again
    other = _simulate(capsys, *args, "--seed", "1")
    assert other != first
    assert first["kv_cache_tokens"] > 100_000
    for rung, rate in zip(first["rates"], (2, 8)):
        assert rung["rps"] == rate and rung["requests"] > 0
        for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            values = rung[metric]
            assert 0 < values["p50"] <= values["p90"] <= values["p99"]
        assert 1.0 < rung["acceptance_length"] <= 4.0
        assert rung["output_tokens_per_s"] > 0 and rung["requests_per_s"] > 0


def test_speculation_gains_most_at_low_load_and_costs_output_at_saturation(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At one request a second EAGLE-3 cuts TPOT; far past what the GPU serves, verification is
    compute-bound and the drafted tokens it rejects cost output."""
    args = ["--rates", "1,200", "--duration", "20"]
    plain = _simulate(capsys, *args)["rates"]
    eagle = _simulate(capsys, *args, "--speculative-config", EAGLE)["rates"]
    low_gain = 1 - eagle[0]["tpot_ms"]["p50"] / plain[0]["tpot_ms"]["p50"]
    saturated_gain = eagle[1]["output_tokens_per_s"] / plain[1]["output_tokens_per_s"] - 1
    assert low_gain > 0.25
    assert saturated_gain < low_gain / 2


def test_answers_are_sampled_as_vllm_samples_a_request_that_names_no_temperature(
        capsys: pytest.CaptureFixture[str]) -> None:
    """At the model's generation defaults (Qwen3's 0.6), which accept fewer drafted tokens than greedy."""
    args = ["--rates", "1", "--duration", "20", "--speculative-config", EAGLE]
    default = _simulate(capsys, *args)
    assert default == _simulate(capsys, *args, "--temperature", "0.6")
    greedy = _simulate(capsys, *args, "--temperature", "0")
    assert greedy["rates"][0]["acceptance_length"] > default["rates"][0]["acceptance_length"]


def test_a_profile_file_adds_a_gpu_and_overrides_an_efficiency(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    profile = tmp_path / "l20.yaml"
    profile.write_text("gpus:\n  L20: {memory_bytes: 48.0e+9, hbm_bytes_per_second: 864.0e+9, "
                       "bf16_flops: 119.5e+12, link_bytes_per_second: 32.0e+9}\n"
                       "efficiency: {target_bandwidth: 0.7}\n")
    base = ["simulate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--rates", "1", "--duration", "20",
            "--output-tokens", "100", "--json"]
    assert main([*base, "--gpu", "L20", "--profile", str(profile)]) == 0
    l20 = json.loads(capsys.readouterr().out)["rates"][0]["tpot_ms"]["p50"]
    assert main([*base, "--gpu", "H100"]) == 0
    h100 = json.loads(capsys.readouterr().out)["rates"][0]["tpot_ms"]["p50"]
    # decode streams the weights: the ratio of achieved bandwidths, give or take the fixed costs
    assert 3.5 < l20 / h100 < 6.0


def test_tensor_parallelism_splits_weights_and_kv_and_pays_its_all_reduces() -> None:
    one, two = (EngineProfile.build("H200", "Qwen/Qwen3-32B", tp) for tp in (1, 2))
    assert two.kv_capacity_tokens(None) > 2 * one.kv_capacity_tokens(None)  # the weights split too
    decode = [Work(1500, 1)]
    t1, t2 = Physics(one, None).step_time(decode).seconds, Physics(two, None).step_time(decode).seconds
    assert t1 / 2 < t2 < t1  # faster, but not twice: 128 all-reduces a step
    with pytest.raises(ValueError, match="too little to serve"):
        EngineProfile.build("H100", "meta-llama/Llama-3.1-70B-Instruct", 1).kv_capacity_tokens(None)
    assert EngineProfile.build("H100", "meta-llama/Llama-3.1-70B-Instruct", 4).kv_capacity_tokens("eagle3") > 0


def test_a_mixed_step_charges_the_decodes_kv_reads_on_top_of_the_prefill() -> None:
    """Attention is its own kernels: decoding sequences beside a compute-bound prefill chunk still
    read their KV, and the step takes at least that much longer."""
    profile = EngineProfile()
    physics = Physics(profile, None)
    prefill = [Work(0, 4096)]
    decodes = [Work(8000, 1)] * 64
    alone = physics.step_time(prefill).seconds
    mixed = physics.step_time(prefill + decodes)
    kv_read = 64 * 8001 * profile.target.kv_bytes_per_token / (
        profile.gpu.hbm_bytes_per_second * profile.efficiency.attention_bandwidth)
    assert mixed.seconds >= alone + kv_read
    assert min(mixed.charges[1:]) > kv_read / 64 * 0.99


def test_a_gemm_is_priced_within_a_seventh_of_published_h100_kernels_and_flat_below_the_ridge() -> None:
    """The roofline against kernels nobody here timed (``bench/emulator_vs_published.py``): off by no
    more than 15% from one token to 256, and as flat as they are to 128 tokens."""
    profile = EngineProfile.build("H100", "meta-llama/Llama-3.1-8B-Instruct")
    for (_, n, k), by_tokens in GEMM_TFLOPS.items():
        for tokens, tflops in by_tokens.items():
            published = 2.0 * n * k * tokens / (tflops * 1e12)
            assert gemm_seconds(profile.gpu, profile.efficiency, n, k, tokens) == pytest.approx(published, rel=0.15)
        assert gemm_seconds(profile.gpu, profile.efficiency, n, k, 128) == gemm_seconds(
            profile.gpu, profile.efficiency, n, k, 1)


def test_a_speculation_round_costs_more_against_plain_decoding_as_the_batch_grows() -> None:
    profile = EngineProfile.build("H200", "Qwen/Qwen3-32B", 2)
    plain, eagle = Physics(profile, None), Physics(profile, "eagle3")

    def ratio(batch: int) -> float:
        return eagle.step_time([Work(1500, 4, 3)] * batch).seconds / plain.step_time([Work(1500, 1)] * batch).seconds

    ratios = [ratio(b) for b in (1, 16, 64, 256)]
    assert ratios == sorted(ratios) and ratios[0] < 1.3 < 2.0 < ratios[-1]


def test_when_kv_runs_out_the_last_admitted_is_preempted_and_every_answer_still_completes(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Blocks are allocated as tokens are computed; a pool short of KV preempts and recomputes
    rather than refusing or losing a request."""
    args = ["--rates", "5", "--duration", "10", "--prompt-tokens", "1000-2000", "--output-tokens", "800-1200"]
    roomy = _simulate(capsys, *args)["rates"][0]
    tight = _simulate(capsys, *args, "--gpu-memory-utilization", "0.33")
    assert tight["kv_cache_tokens"] < 50_000
    rung = tight["rates"][0]
    assert roomy["preemptions"] == 0 < rung["preemptions"]
    assert rung["requests"] == roomy["requests"] and rung["failed"] == 0
    assert rung["output_tokens_per_s"] < roomy["output_tokens_per_s"]  # recomputing costs output


def test_validate_sets_the_pools_measurements_beside_the_emulators(capsys: pytest.CaptureFixture[str]) -> None:
    """Against emulated pools paced faster than real time (as an operator's real ones would be
    measured), the same ladder comes out as the emulator predicts, within the pacing's noise."""
    from draftgate.emulator.engine import SpecConfig
    from tests.conftest import emulator

    config = '{"method": "eagle3", "model": "RedHatAI/Qwen3-32B-speculator.eagle3", "num_speculative_tokens": 3}'
    scale = 0.05
    with emulator(7, True, time_scale=scale, spec=SpecConfig("eagle3", 3)) as on, \
            emulator(7, False, time_scale=scale) as off:
        args = ["validate", "--spec-on", on.url, "--spec-off", off.url, "--speculative-config", config,
                "--time-scale", str(scale), "--rates", "1,2", "--duration", "20", "--output-tokens", "100:20",
                "--json"]
        assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"spec-off", "spec-on"}
    for pool, sides in result.items():
        for measured, emulated in zip(sides["measured"], sides["emulated"]):
            assert measured["requests"] == emulated["requests"] > 10  # the same schedule, every answer
            assert measured["failed"] == 0
            # a busy machine slows the wall-clock pacing, never speeds it up
            assert 0.7 < measured["tpot_ms"]["p50"] / emulated["tpot_ms"]["p50"] < 3.0
    spec = result["spec-on"]
    assert spec["measured"][0]["acceptance_length"] == pytest.approx(spec["emulated"][0]["acceptance_length"], rel=0.2)
    assert spec["measured"][0]["tpot_ms"]["p50"] < result["spec-off"]["measured"][0]["tpot_ms"]["p50"]


def test_validate_refuses_what_it_cannot_measure(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate"]) == 2
    assert "give --spec-on URL, --spec-off URL or both" in capsys.readouterr().err
    assert main(["validate", "--spec-on", "http://127.0.0.1:9"]) == 2
    assert "--speculative-config" in capsys.readouterr().err
    assert main(["validate", "--spec-off", "http://127.0.0.1:9", "--rates", "1", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "unreachable" in err and err.count("\n") == 1


def test_an_emulated_server_short_of_kv_preempts_counts_it_and_answers_every_request() -> None:
    import asyncio

    import httpx

    from tests.conftest import emulator

    tight = EngineProfile.build("H100", "meta-llama/Llama-3.1-8B-Instruct")
    tight = tight.model_copy(update={"efficiency": tight.efficiency.model_copy(update={"memory_utilization": 0.33})})
    body = {"model": "Qwen/Qwen3-32B", "prompt": " ".join(["cat"] * 1500), "max_tokens": 1000, "ignore_eos": True}

    async def burst(url: str) -> list[int]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            answers = await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(30)))
        return [a.json()["usage"]["completion_tokens"] for a in answers]

    with emulator(3, False, time_scale=0.01, profile=tight) as server:
        assert asyncio.run(burst(server.url)) == [1000] * 30
        metrics = httpx.get(f"{server.url}/metrics").text
    preempted = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                 if line.startswith("vllm:num_preemptions_total")]
    assert preempted and preempted[0] > 0
