"""The built-in CNN job as a 2-worker Ray Train run on a private Ray instance: it resumes a single-process
checkpoint and publishes dlrun's gauges through Ray's metrics agent."""
from __future__ import annotations

import re
import time
import urllib.request

import pytest

from infra.reach import free_port
from jobs.checkpoint import open_checkpoints
from tests.support.training_jobs import run_job


@pytest.fixture
def local_ray(monkeypatch):
    """A private Ray instance whose metrics agent exports every second on a known port (without the
    session head's token settings: it is its own cluster)."""
    import ray

    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    metrics_port = free_port()
    context = ray.init(address="local", num_cpus=3, include_dashboard=False,
                       _metrics_export_port=metrics_port,
                       _system_config={"metrics_report_interval_ms": 1000})
    yield context.address_info["gcs_address"], metrics_port
    ray.shutdown()


def scrape_dlrun_gauges(port: int, job_id: str) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    pattern = re.compile(r'^ray_(dlrun_\w+)\{[^}]*job_id="' + re.escape(job_id)
                         + r'"[^}]*\} (\S+)$')
    return {m.group(1): float(m.group(2)) for m in map(pattern.match, text.splitlines()) if m}


@pytest.mark.ray
def test_two_worker_torchtrainer_run_resumes_and_publishes_ray_gauges(tmp_path, local_ray):
    gcs_address, metrics_port = local_ray
    ckpt = tmp_path / "ckpt"
    run_job("cnn", "--epochs", "1", "--checkpoint-dir", str(ckpt))  # a single-process epoch 1
    epochs, events, result = run_job("cnn", "--num-workers", "2", "--epochs", "3",
                                     "--checkpoint-dir", str(ckpt), timeout=300,
                                     RAY_ADDRESS=gcs_address, DLRUN_JOB_ID="job-under-test")
    assert result["world_size"] == 2 and result["device"] == "cpu"
    assert [e["epoch"] for e in events] == [1] and result["resumed_from"] == 1
    assert [m["epoch"] for m in epochs] == [2, 3]  # rank 0 only reports
    assert open_checkpoints(str(ckpt)).epochs() == [2, 3]

    deadline, gauges = time.monotonic() + 15, {}
    while gauges.get("dlrun_epoch") != 3.0 and time.monotonic() < deadline:
        time.sleep(0.5)
        gauges = scrape_dlrun_gauges(metrics_port, "job-under-test")
    assert gauges.get("dlrun_epoch") == 3.0, gauges
    assert gauges["dlrun_accuracy"] == pytest.approx(result["accuracy"])
    assert gauges["dlrun_samples_per_second"] > 0
