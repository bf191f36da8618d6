"""With dlrun's own Ray head up, the fixed start of a local job is Ray's run time of one no-op job on it,
measured once and cached."""
import json
import shutil
from dataclasses import asdict

import pytest

from orchestrator.estimate import estimator
from orchestrator.planning import startup
from tests.support.planning import LOCAL_CPU, synthetic

pytestmark = pytest.mark.ray


def _adopt(head, dlrun_home):
    """Make the session's head the one dlrun started from this $DLRUN_HOME (its record and token)."""
    from infra.auth import LOCAL, token_path

    (dlrun_home / "local_head.json").write_text(json.dumps(asdict(head)))
    shutil.copy(head.token_path, token_path(LOCAL))


def _probe_jobs(head):
    from orchestrator.runs.ray_jobs import RayJobs

    return [j for j in RayJobs(head.dashboard_url).list() if j.metadata.get("dlrun_probe")]


def test_a_running_dlrun_head_gets_one_no_op_job_timed_as_a_run_and_cached(ray_head, dlrun_home, monkeypatch):
    """First a plan with no head (prior), then dlrun's head is up: the next plan measures Ray's job start
    for real, once; the figure is Ray's own run time of the no-op job, as a run's is recorded (or the job's imports
    alone, if they took longer)."""
    monkeypatch.setattr(startup, "_memo", {})
    assert startup.measure()["basis"] == "imports + prior"
    before = len(_probe_jobs(ray_head))
    _adopt(ray_head, dlrun_home)
    monkeypatch.setattr(startup, "_memo", {})
    data = startup.measure()
    assert data["basis"] == "ray job"
    probes = _probe_jobs(ray_head)
    assert len(probes) == before + 1
    job = max(probes, key=lambda j: j.start_time)
    assert job.status == "SUCCEEDED" and job.entrypoint == startup.RAY_JOB_ENTRYPOINT
    ray_run = (job.end_time - job.start_time) / 1000.0
    # never less than the job's imports in a fresh process, measured first (on a busy machine they may have taken
    # longer than Ray's whole run did a minute later: 7.9 s against 6.1 s beside two busy processes)
    assert data["seconds"] == pytest.approx(max(ray_run, data["process_seconds"]), abs=1e-3)
    # the job process inside it imported torch: at least as long as the same imports in a fresh process, less slack
    assert ray_run >= 0.5 * data["process_seconds"]
    cached = json.loads((dlrun_home / "profiles" / "local_startup.json").read_text())
    assert cached["basis"] == "ray job" and cached["seconds"] == data["seconds"]
    # measured once per machine: later processes read it, the head is not asked again
    monkeypatch.setattr(startup, "_memo", {})
    assert startup.local_startup_seconds() == data["seconds"]
    assert len(_probe_jobs(ray_head)) == before + 1
    e = estimator.estimate(synthetic(local={"cpu": 0.01}, steps=100), LOCAL_CPU, spot=False)
    assert e.start_seconds == pytest.approx(data["seconds"] + estimator.JOB_START_SECONDS)
