"""Every command that takes a file or an address refuses a bad one in one line, with exit
status 2 and no traceback; an address is taken with or without ``/metrics`` or ``/v1``."""

from __future__ import annotations

import pytest

from draftgate.cli.main import main

UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("bad")
    (folder / "bad.yaml").write_text("not: [yaml\n")
    (folder / "request.json").write_text('{"messages": [{"role": "user", "content": "hi"}]}')
    return {"bad_yaml": str(folder / "bad.yaml"), "missing": str(folder / "missing.yaml"),
            "request": str(folder / "request.json")}


CASES = {
    "a calibration file that is not YAML": (["explain", "--calibration", "{bad_yaml}", "{request}"],
                                             "not valid YAML at line"),
    "a configuration that is not there": (["explain", "--config", "{missing}", "{request}"], "does not exist"),
    "a proxy's address that is no URL": (["plan", "--gpus", "4", "--from-metrics", "proxy:8000"],
                                          "is not an http(s) URL with a host"),
    "a proxy's OpenAI base URL, unreachable": (["plan", "--gpus", "4", "--from-metrics", f"{UNREACHABLE}/v1"],
                                                f"cannot read {UNREACHABLE}/metrics"),
    "a pool's address that is no URL": (["calibrate", "--spec-on", "vllm-spec", "--spec-off", UNREACHABLE],
                                         "--spec-on: 'vllm-spec' is not an http(s) URL"),
    "a pool's scrape address, unreachable": (["calibrate", "--spec-on", f"{UNREACHABLE}/metrics", "--spec-off",
                                              f"{UNREACHABLE}/v1/"], f"{UNREACHABLE} is unreachable"),
    "a validated pool that is no URL": (["validate", "--spec-off", "ftp://pool"], "--spec-off: 'ftp://pool'"),
    "an evaluated pool that is no URL": (["evaluate", "--spec-off", "pool:8000"], "--spec-off: 'pool:8000'"),
    "a hardware profile that is not YAML": (["evaluate", "--profile", "{bad_yaml}"], "is not YAML"),
    "an emulator profile that is not there": (["emulate", "--profile", "{missing}"], "No such file"),
    "a simulated profile that is not YAML": (["simulate", "--profile", "{bad_yaml}"], "is not YAML"),
    "a proxy configuration that is not YAML": (["serve", "--config", "{bad_yaml}"], "is not valid YAML at line"),
    "answers to replay that are not there": (["measure-ngram", "--data", "{missing}"], "cannot read"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_status_2(case: str, files: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    argv, needle = CASES[case]
    status = main([arg.format(**files) for arg in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith(f"draftgate {argv[0]}: error: "), err
    assert needle in err and "Traceback" not in err, err
