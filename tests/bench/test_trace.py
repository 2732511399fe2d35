"""bench.trace_proxy turns per-request timestamps into stage durations."""

from __future__ import annotations

import pytest

from bench.trace_proxy import STAGES, stage_times


def test_stage_times_subtract_the_estimate_from_the_time_before_planning() -> None:
    marks = {"entered": 10.0, "estimate": 0.5, "estimate_end": 12.0, "shape_key": 0.25, "decide_end": 13.0,
             "sent": 13.75, "headers": 20.0, "answered": 20.5, "done": 22.0, "fixed_loop": 0.125}
    stages = stage_times(marks)
    assert stages["to_plan"] == pytest.approx(1.5)  # 12.0 - 10.0, less the estimate's own 0.5
    assert stages["plan_to_upstream"] == pytest.approx(0.75)
    assert stages["upstream_to_client"] == pytest.approx(0.5)
    assert stages["after_response"] == pytest.approx(1.5)
    assert stages["estimate"] == 0.5 and stages["shape_key"] == 0.25 and stages["fixed_loop"] == 0.125
    assert set(stages) <= set(STAGES)  # timestamps are not stages


def test_a_request_that_never_went_upstream_has_no_upstream_stages() -> None:
    stages = stage_times({"entered": 1.0, "estimate": 0.5, "estimate_end": 2.0, "decide_end": 2.5, "answered": 3.0,
                          "done": 3.5})
    assert "plan_to_upstream" not in stages and "upstream_to_client" not in stages
    assert stages["after_response"] == pytest.approx(0.5)
