"""Monitoring end to end on a real local Ray head: a job dlrun submits is readable through Ray's own
surfaces — its metadata in the dashboard's Jobs API, its training gauges on the head's Prometheus
endpoint (--metrics-export-port), and (when Prometheus is installed) in a Prometheus that
`dlrun dashboard --metrics` would start with Ray's generated config.

The helpers at the top are shared with tests/test_dashboard_browser.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from infra.local import head as raycluster
from tests.conftest import share_profiles

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray

EPOCHS = 3
# every key dlrun's runner puts in the Ray job's metadata (orchestrator/runner.py `_attempt`)
METADATA_KEYS = {"dlrun_job_id", "dlrun_name", "backend", "instance", "gpu", "spot", "est_hours",
                 "est_cost", "max_cost", "schedule", "attempt"}


# ---------------------------------------------------------------- shared helpers
def dlrun(*args, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def submit_digits_cnn(head: raycluster.LocalHead, workdir: Path, *, flush_s: int | None = None,
                      watch_metrics: bool = False, profiles: Path | None = None) -> dict:
    """`dlrun submit` a short digits-cnn job on `head`; the job's `dlrun status --json` record, plus its
    DLRUN_RESULT payload (`result`) and the env the CLI ran with (`env`).

    With watch_metrics, the head's metrics endpoint is scraped while the job runs: Ray keeps a gauge
    only ~2 export intervals after its process stops refreshing it, so a finished job's gauges
    vanish soon after it ends (the session head exports every second: tests/conftest.py). `gauges` is the
    last value seen per ray_dlrun_* name for the job."""
    text = (ROOT / "configs/examples/digits_cnn.yaml").read_text()
    assert "epochs: 20" in text and 'SEED: "0"' in text
    text = text.replace("epochs: 20", f"epochs: {EPOCHS}")
    if flush_s:  # the spec's env reaches the job: keep it alive for Ray's last metrics export
        text = text.replace('SEED: "0"', f'SEED: "0"\n  DLRUN_METRICS_FLUSH_S: "{flush_s}"')
    job_file = workdir / "digits_cnn_short.yaml"
    job_file.write_text(text + f"checkpoint: {workdir / 'ckpt'}\n")
    home = workdir / "dlrun-home"
    home.mkdir(exist_ok=True)
    if profiles:  # the session's machine profiles (tests/conftest.py)
        share_profiles(home, profiles)
    env = dict(os.environ, DLRUN_RAY_ADDRESS=head.dashboard_url, DLRUN_HOME=str(home),
               RAY_USAGE_STATS_ENABLED="0")
    out_path, err_path = workdir / "submit.out", workdir / "submit.err"
    seen: dict[str, dict[str, float]] = {}  # job_id label -> {metric name: last value}
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file),
                                 "--backend", "local"], stdout=out, stderr=err, cwd=ROOT, env=env)
        deadline = time.monotonic() + 300
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if watch_metrics and head.metrics_port:
                    try:
                        for name, samples in scrape(head.metrics_port).items():
                            if name.startswith("ray_dlrun_"):
                                for labels, value in samples:
                                    seen.setdefault(labels.get("job_id", ""), {})[name] = value
                    except OSError:
                        pass
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
    job_id = stdout.split()[0]
    st = dlrun("status", job_id, "--json", env=env)
    assert st.returncode == 0, st.stderr
    record = json.loads(st.stdout)
    assert record["status"] == "SUCCEEDED" and record["ray_submission_id"], record
    assert record["metrics"] and record["metrics"]["epochs_run"] == EPOCHS, record
    return {**record, "job_id": job_id, "result": record["metrics"], "env": env,
            "gauges": seen.get(job_id, {}), "other_gauge_jobs": sorted(set(seen) - {job_id})}


def get_json(url: str, timeout: float = 10.0, headers: dict | None = None):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
        return json.loads(r.read())


def head_auth() -> dict:
    """The session head runs with token auth, like every head dlrun starts."""
    return {"Authorization": f"Bearer {Path(os.environ['RAY_AUTH_TOKEN_PATH']).read_text().strip()}"}


def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    """Prometheus text at 127.0.0.1:port/metrics -> {sample name: [(labels, value), ...]}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


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
    assert got.get("ray_dlrun_accrued_cost", 0.0) >= 0  # local CPU is free: 0


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
    from orchestrator.cli import report as cli_report

    session = cli_report.ray_session_dir(ray_head)
    assert session is not None and (session / "metrics" / "prometheus" / "prometheus.yml").exists()
    monkeypatch.setattr(cli_report, "ray_session_dir", lambda head=None: session)
    monkeypatch.setattr(cli_report.shutil, "which", lambda name, *a, **k: None)
    monkeypatch.setattr(cli_report, "_answers", lambda url, timeout=1.0: False)  # nothing on :9090/:3000
    lines = cli_report.start_metrics_stack()
    assert any(line.startswith("prometheus: not installed") and "apt-get install prometheus" in line
               for line in lines), lines
    assert any(line.startswith("grafana: not installed") for line in lines), lines
