"""The fixed start of a local job measured for real (a fresh Python process importing torch and dlrun's job
helpers), once per machine, and cached under $DLRUN_HOME/profiles."""
import json
import time

import pytest

from orchestrator.estimate import estimator
from orchestrator.planning import startup
from tests.support.planning import LOCAL_CPU, synthetic


def test_the_local_start_is_measured_once_then_read_from_dlrun_home(dlrun_home, monkeypatch):
    monkeypatch.setattr(startup, "_memo", {})
    first = startup.local_startup_seconds()
    cached = json.loads((dlrun_home / "profiles" / "local_startup.json").read_text())
    assert first > 0.2 and cached["seconds"] == pytest.approx(first, abs=1e-3) and "torch" in cached["probe"]
    # another process (a fresh memo) reads the file instead of measuring again
    (dlrun_home / "profiles" / "local_startup.json").write_text(json.dumps({**cached, "seconds": 3.21}))
    monkeypatch.setattr(startup, "_memo", {})
    assert startup.local_startup_seconds() == 3.21
    e = estimator.estimate(synthetic(local={"cpu": 0.01}, steps=100), LOCAL_CPU, spot=False)
    assert e.start_seconds == pytest.approx(3.21 + estimator.JOB_START_SECONDS)
    assert e.run_seconds == pytest.approx(0.01 * 100 * (1 + estimator.EVAL_FRACTION) + e.start_seconds)


def test_with_no_head_up_the_start_is_the_import_timing_plus_the_ray_prior_and_nothing_starts(
        dlrun_home, monkeypatch):
    monkeypatch.setattr(startup, "_memo", {})
    t0 = time.perf_counter()
    data = startup.measure()
    assert data["basis"] == "imports + prior" and data["process_seconds"] > 0.2
    assert data["seconds"] == pytest.approx(data["process_seconds"] + startup.RAY_JOB_PRIOR_SECONDS, abs=1e-3)
    assert startup.ray_share_seconds() == pytest.approx(startup.RAY_JOB_PRIOR_SECONDS, abs=1e-3)
    assert not (dlrun_home / "local_head.json").exists()  # no head started for a plan
    assert time.perf_counter() - t0 < data["process_seconds"] + 5
    # a later process reads the file: no import timing again, still no head
    monkeypatch.setattr(startup, "_memo", {})
    monkeypatch.setattr(startup, "process_start_seconds", lambda: pytest.fail("measured again"))
    assert startup.local_startup_seconds() == pytest.approx(data["seconds"])
