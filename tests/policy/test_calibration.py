"""The calibration model: defaults, YAML round trip, strict loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from draftgate.calibration_file import load_calibration, save_calibration
from draftgate.policy.calibration import (
    Calibration,
    CalibrationError,
    Curve,
    dump_calibration,
)
from draftgate.policy.gate import PoolView, predicted_taus


def test_defaults_are_marked_and_usable() -> None:
    cal = Calibration()
    assert cal.is_default and cal.source == "defaults"
    assert cal.pool("spec", gamma=4).gamma == 4
    assert 0 < cal.pool("spec").delta(1) < cal.pool("spec").delta(64)


def test_round_trip(tmp_path: Path) -> None:
    cal = Calibration(source="measured", kappa=0.8, sample_sizes={"A": 40})
    path = tmp_path / "cal.yaml"
    save_calibration(cal, path)
    again = load_calibration(path)
    assert again == cal


def test_rho_interpolates_with_temperature() -> None:
    cal = Calibration()
    greedy, half, sampled, hot = (cal.rho_at(t) for t in (0.0, 0.3, 0.6, 1.5))
    assert greedy.f == cal.rho_greedy.f and sampled.f == pytest.approx(cal.rho_sampled.f)
    assert sampled.f < half.f < greedy.f
    assert hot == sampled


def test_curve_interpolates_and_extends() -> None:
    curve = Curve(points=[(1, 0.0), (3, 1.0)])
    assert curve(0) == 0.0 and curve(2) == 0.5 and curve(5) == 2.0
    with pytest.raises(ValueError, match="increasing"):
        Curve(points=[(3, 0.0), (1, 1.0)])


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    raw = yaml.safe_load(dump_calibration(Calibration()))
    raw["schema_version"] = 2
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(CalibrationError, match="schema_version is 2"):
        load_calibration(path)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.__setitem__("kappa", -1), "kappa"),
        (lambda r: r["rho_greedy"].__setitem__("f", 1.5), "rho_greedy"),
        (lambda r: r.__setitem__("surprise", 1), "surprise"),
        (lambda r: r.__setitem__("pools", {"spec": {"gamma": 0}}), "pools.spec.gamma"),
    ],
)
def test_out_of_range_values_name_the_field(tmp_path: Path, mutate, field: str) -> None:
    raw = yaml.safe_load(dump_calibration(Calibration()))
    mutate(raw)
    path = tmp_path / "cal.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(CalibrationError, match=field.replace(".", r"\.")):
        load_calibration(path)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(CalibrationError, match="cannot read"):
        load_calibration(tmp_path / "missing.yaml")


def test_values_derived_from_a_calibration_follow_its_copies() -> None:
    pool = PoolView("spec-on", "draft_model", gamma=8)
    base = Calibration()
    before = predicted_taus(base, pool, 0.6)
    changed = base.model_copy(update={"kappa": base.kappa / 2})
    after = predicted_taus(changed, pool, 0.6)
    # the copy's own kappa, not the original's remembered taus
    assert after == predicted_taus(Calibration(kappa=base.kappa / 2), pool, 0.6) != before
    assert predicted_taus(base, pool, 0.6) == before
