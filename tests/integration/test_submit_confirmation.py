"""`dlrun submit` asks before anything billed starts, at a terminal (orchestrator/cli/confirm.py): run as a
process on a pseudo-terminal against AWS under moto's server (and the Service Quotas stand-in), it shows the
offer, its estimate and the budget, and a "no" starts nothing (no instance in EC2, no job recorded)."""
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import boto3
import yaml

from orchestrator.cli.confirm import launch_approved
from tests.support.aws_api_server import AwsApis
from tests.support.aws_moto import moto_server  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


def read_until(fd: int, wanted: str, seconds: float) -> str:
    seen, deadline = "", time.monotonic() + seconds
    while wanted not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk.decode(errors="replace")
    return seen


def test_a_no_at_the_terminal_starts_nothing(moto_server, tmp_path):  # noqa: F811
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": TINY,
                                   "resources": {"clouds": ["aws"], "regions": ["us-east-1"]}}))
    with AwsApis() as quotas:
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DLRUN_HOME": str(tmp_path / "dlrun"),
               "DLRUN_LOCAL_GPUS": "none", "DLRUN_CATALOG_REFRESH": "off", "PYTHONPATH": str(ROOT),
               "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": moto_server,
               "AWS_ENDPOINT_URL_SERVICE_QUOTAS": quotas.endpoint, "COLUMNS": "80"}
        leader, follower = pty.openpty()
        proc = subprocess.Popen([str(Path(sys.executable).with_name("dlrun")), "submit", str(job), "--max-cost", "5"],
                                stdin=follower, stdout=follower, stderr=follower, env=env, cwd=ROOT,
                                start_new_session=True)
        os.close(follower)
        try:
            screen = read_until(leader, "start it (billed)? [y/N]", 180)
            assert "start it (billed)? [y/N]" in screen, screen
            os.write(leader, b"n\r")
            screen += read_until(leader, "nothing was launched", 60)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(leader)
    asked = next(line for line in screen.splitlines() if line.startswith("aws us-east-1 "))
    assert " at $" in asked and "/h: est. " in asked and "budget $5.00" in asked, screen
    assert "not started: nothing was launched or billed" in screen and "Traceback" not in screen
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server, aws_access_key_id="testing",
                       aws_secret_access_key="testing")
    assert ec2.describe_instances()["Reservations"] == []


def test_no_question_without_a_terminal(tmp_path, monkeypatch):
    """A script, a schedule or a pipe is never asked (its stdin is no terminal): the launch goes ahead."""
    import io

    from orchestrator.planning.planner import plan_job
    from orchestrator.planning.spec import load_job

    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": TINY, "resources": {"clouds": ["aws"]}}))
    spec = load_job(job)
    from infra.catalog import load_offers

    plan = plan_job(spec, offers=[o for o in load_offers() if o.cloud == "aws"], quotas=None)
    assert plan.chosen is not None and launch_approved(plan, spec)
