"""``draftgate law`` as a user runs it: a real subprocess, JSON and table, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DRAFTGATE = [sys.executable, "-m", "draftgate.cli.main"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DRAFTGATE, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("gamma", "ov", "exact", "closed", "saving"),
    [(4, 0.17, 0.588, 0.332, 0.36), (8, 0.10, 0.555, 0.200, 0.58), (8, 0.17, 0.421, 0.184, 0.48), (16, 0.17, 0.267, 0.098, 0.56)],
)
def test_law_json_reproduces_the_design_table(gamma: int, ov: float, exact: float, closed: float, saving: float) -> None:
    proc = run("law", "--gamma", str(gamma), "--delta", "0.02", "--draft-cost", str(round(ov - 0.02, 6)), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["eps_star"]["exact"] == pytest.approx(exact, abs=5e-4)
    assert out["eps_star"]["closed_form"] == pytest.approx(closed, abs=5e-4)
    assert out["saving_at_threshold"]["closed_form"] == pytest.approx(saving, abs=5e-3)
    assert abs(out["saving_at_threshold"]["exact"]) < 1e-9


def test_law_json_keys() -> None:
    proc = run("law", "--gamma", "8", "--kappa", "0.9", "--delta", "0.02", "--draft-cost", "0.15",
               "--rho", "0.95,0.55,0.35", "--mix", "0.6,0.1,0.3", "--json")
    out = json.loads(proc.stdout)
    for key in ("alpha", "tau", "saving", "speedup", "net_cost_ratio"):
        assert isinstance(out[key], float)
    assert set(out["span"]["tau"]) == {"s", "r", "f"}
    assert out["span"]["saving"] < out["saving"]  # spans never exceed the mixture
    assert set(out["marginal_tau_per_ws"]) == {"exact", "paper"}
    assert set(out["eps_star"]) == {"exact", "closed_form"}
    assert out["break_even_ws"]["exact"]["value"] < out["break_even_ws"]["closed_form"]["value"]
    # hand check: rho_bar = 0.6*0.95 + 0.1*0.55 + 0.3*0.35 = 0.73, alpha = 1 - 0.9*0.27 = 0.757
    assert out["alpha"] == pytest.approx(0.757)


def test_law_table_and_plot(tmp_path: Path) -> None:
    png = tmp_path / "law.png"
    proc = run("law", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "break-even eps*" in proc.stdout and "closed form" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--kappa", "0"], "kappa"),
        (["--mix", "0.5,0.5,0.5"], "sum to 1"),
        (["--rho", "0.9,0.5"], "three values"),
        (["--rho", "a,b,c"], "comma-separated"),
        (["--gamma", "0"], "gamma"),
    ],
)
def test_law_bad_arguments_exit_2_with_one_line(args: list[str], needle: str) -> None:
    proc = run("law", *args)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
