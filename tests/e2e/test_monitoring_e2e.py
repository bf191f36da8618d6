"""Monitoring end to end on a real local Ray head: a job dlrun submits is readable through Ray's own
surfaces — its metadata in the dashboard's Jobs API, its training gauges on the head's Prometheus
endpoint (--metrics-export-port), and (when Prometheus is installed) in a Prometheus that
`dlrun dashboard --metrics` would start with Ray's generated config.

Its job is submitted once per session (tests/support/monitoring.py, the `monitored_job` fixture of
tests/e2e/conftest.py) and read by tests/e2e/test_dashboard_browser.py too.
"""
from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.support.monitoring import EPOCHS


pytestmark = pytest.mark.ray

# every key dlrun's runner puts in the Ray job's metadata (orchestrator/runner.py `_attempt`)
METADATA_KEYS = {"dlrun_job_id", "dlrun_name", "backend", "instance", "gpu", "spot", "est_hours",
                 "est_cost", "max_cost", "schedule", "attempt"}


# ---------------------------------------------------------------- helpers
def get_json(url: str, timeout: float = 10.0, headers: dict | None = None):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
        return json.loads(r.read())


def head_auth() -> dict:
    """The session head runs with token auth, like every head dlrun starts."""
    return {"Authorization": f"Bearer {Path(os.environ['RAY_AUTH_TOKEN_PATH']).read_text().strip()}"}


# ---------------------------------------------------------------- fixtures
# Prometheus and the monitored job are session-scoped, in tests/conftest.py (`prometheus`,
# `monitored_job`): the dashboard browser test reads the same job instead of submitting its own.
@pytest.fixture(scope="module")
def job(monitored_job):
    return monitored_job


# ---------------------------------------------------------------- tests
def test_jobs_api_shows_dlrun_metadata(ray_head, job):
    jobs = get_json(f"{ray_head.dashboard_url}/api/jobs/", headers=head_auth())
    mine = [j for j in jobs if j.get("submission_id") == job["ray_submission_id"]]
    assert len(mine) == 1, [j.get("submission_id") for j in jobs]
    info = mine[0]
    assert info["status"] == "SUCCEEDED" and info["type"] == "SUBMISSION"
    meta = info["metadata"]
    assert METADATA_KEYS <= set(meta), meta
    assert all(isinstance(v, str) for v in meta.values()), meta
    assert meta["dlrun_job_id"] == job["job_id"] and meta["dlrun_name"] == "digits-cnn"
    assert meta["backend"] == "local" and meta["gpu"] == "CPU" and meta["spot"] == "false"
    assert meta["instance"] == job["instance_type"] and meta["attempt"] == "1" and meta["schedule"] == ""
    assert float(meta["max_cost"]) == 5.0
    assert float(meta["est_hours"]) >= 0 and abs(float(meta["est_cost"]) - job["est_cost"]) < 1e-4
    # the per-job endpoint (what the job detail page reads) agrees, and so does Ray's own client
    assert get_json(f"{ray_head.dashboard_url}/api/jobs/{job['ray_submission_id']}",
                    headers=head_auth())["metadata"] == meta
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head.dashboard_url, headers=head_auth())  # explicit: Ray caches its auth mode
    assert client.get_job_info(job["ray_submission_id"]).metadata == meta


def test_training_gauges_on_head_metrics_endpoint(ray_head, job):
    """Ray's metrics agent on the head serves user gauges at --metrics-export-port (LocalHead.metrics_port),
    tagged with the dlrun job id; the last export holds the final epoch's values (= DLRUN_RESULT)."""
    got = job["gauges"]
    want = {"ray_dlrun_epoch", "ray_dlrun_loss", "ray_dlrun_accuracy", "ray_dlrun_samples_per_second"}
    assert want <= set(got), (f"missing on :{ray_head.metrics_port}/metrics: {sorted(want - set(got))} "
                              f"(got {got}; other job_id labels: {job['other_gauge_jobs']}; a Ray head started later on "
                              "this machine takes over /tmp/ray/ray_current_cluster and with it the job's ray.init)")
    # every dlrun gauge carries its job's id (DLRUN_JOB_ID reached the job), never "unknown". (Gauges of
    # other job ids can show up here when another Ray head on this machine started after this one: its
    # jobs' drivers connect to the head named in the shared /tmp/ray/ray_current_cluster.)
    assert "unknown" not in job["other_gauge_jobs"] and "" not in job["other_gauge_jobs"]
    result = job["result"]
    assert got["ray_dlrun_epoch"] == EPOCHS
    assert 0.5 <= got["ray_dlrun_accuracy"] <= 1.0
    assert got["ray_dlrun_accuracy"] == pytest.approx(result["accuracy"], abs=1e-6)
    assert 0 < got["ray_dlrun_loss"] < 5 and got["ray_dlrun_loss"] == pytest.approx(result["loss"], rel=1e-6)
    assert got["ray_dlrun_samples_per_second"] > 0
    # the run's price reaches the job (DLRUN_PRICE_PER_HOUR, 0 on the local backend) and its cost gauge is exported:
    # local CPU is free, so exactly 0 (a missing gauge or a price taken from elsewhere fails here)
    assert got["ray_dlrun_accrued_cost"] == 0.0, got
    # Ray exports a gauge only in the export after it was set (~1 s at the session head's interval); the job sets
    # its last values again every second, so its accuracy stays on the endpoint through its flush wait (>= 5 s)
    assert job["accuracy_shown_s"] >= 4.0, job["accuracy_shown_s"]


def test_prometheus_with_rays_config_scrapes_the_gauges(job, prometheus):
    if prometheus is None:
        pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")
    proc, port = prometheus["proc"], prometheus["port"]
    # the series goes stale once Ray drops the finished job's gauge: ask for its last value in 10 min
    query = urllib.parse.quote(f'last_over_time(ray_dlrun_accuracy{{job_id="{job["job_id"]}"}}[10m])')
    deadline = time.monotonic() + 30
    values = []
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            values = get_json(f"http://127.0.0.1:{port}/api/v1/query?query={query}")["data"]["result"]
        except OSError:
            values = []
        if values:
            break
        time.sleep(2)
    assert proc.poll() is None, prometheus["log"].read_text()[-2000:]
    assert values, "Prometheus never scraped ray_dlrun_accuracy for the job"
    assert float(values[0]["value"][1]) == pytest.approx(job["result"]["accuracy"], abs=1e-6)


def test_dashboard_metrics_says_how_to_install_what_is_missing(ray_head, monkeypatch):
    """`dlrun dashboard --metrics` without Prometheus/Grafana installed: one line each on how to get them."""
    from orchestrator.monitoring import metrics_stack

    session = metrics_stack.ray_session_dir(ray_head)
    assert session is not None and (session / "metrics" / "prometheus" / "prometheus.yml").exists()
    monkeypatch.setattr(metrics_stack, "ray_session_dir", lambda head=None: session)
    monkeypatch.setattr(metrics_stack.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(metrics_stack, "_answers", lambda url, timeout=1.0: False)  # nothing on :9090/:3000
    lines = metrics_stack.start_metrics_stack()
    assert any(line.startswith("prometheus: not installed") and "apt-get install prometheus" in line
               for line in lines), lines
    assert any(line.startswith("grafana: not installed") for line in lines), lines
