"""A short digits-cnn job `dlrun submit`ted to a Ray head while its metrics endpoint is scraped: read by the
monitoring tests, the dashboard browser test and the framework scripts' gauges."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from infra.local import head as raycluster
from tests.support.profiles import share_profiles

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 3


def dlrun(*args, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)


def submit_digits_cnn(head: raycluster.LocalHead, workdir: Path, *, flush_s: int | None = None,
                      watch_metrics: bool = False, profiles: Path | None = None) -> dict:
    """`dlrun submit` a short digits-cnn job on `head`; the job's `dlrun status --json` record, plus its
    DLRUN_RESULT payload (`result`) and the env the CLI ran with (`env`).

    With watch_metrics, the head's metrics endpoint is scraped while the job runs: a finished job's
    gauges vanish an export interval after its process ends (the session head exports every second: tests/e2e/conftest.py). `gauges` is the
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
    if profiles:  # the session's machine profiles (tests/e2e/conftest.py)
        share_profiles(home, profiles)
    env = dict(os.environ, DLRUN_RAY_ADDRESS=head.dashboard_url, DLRUN_HOME=str(home),
               RAY_USAGE_STATS_ENABLED="0")
    out_path, err_path = workdir / "submit.out", workdir / "submit.err"
    seen: dict[str, dict[str, float]] = {}  # job_id label -> {metric name: last value}
    shown_since: dict[str, float] = {}  # job_id label -> since when its accuracy gauge has been on the endpoint
    longest_shown: dict[str, float] = {}  # job_id label -> longest unbroken stretch it was there (s)
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file),
                                 "--backend", "local"], stdout=out, stderr=err, cwd=ROOT, env=env)
        deadline = time.monotonic() + 300
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if watch_metrics and head.metrics_port:
                    try:
                        now, shown = time.monotonic(), set()
                        for name, samples in scrape(head.metrics_port).items():
                            if name.startswith("ray_dlrun_"):
                                for labels, value in samples:
                                    seen.setdefault(labels.get("job_id", ""), {})[name] = value
                                    if name == "ray_dlrun_accuracy":
                                        shown.add(labels.get("job_id", ""))
                        for label in shown:
                            since = shown_since.setdefault(label, now)
                            longest_shown[label] = max(longest_shown.get(label, 0.0), now - since)
                        for label in set(shown_since) - shown:
                            del shown_since[label]
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
            "gauges": seen.get(job_id, {}), "accuracy_shown_s": longest_shown.get(job_id, 0.0), "other_gauge_jobs": sorted(set(seen) - {job_id})}


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
