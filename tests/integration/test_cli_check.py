"""`dlrun check` with credentials: the real boto3 (STS, EC2 under moto, Service Quotas against
tests/support/aws_api_server.py) and google-cloud-compute (tests/support/gce_catalog_server.py) clients say
who the account is, which regions it reaches and the GPU quotas there, on a screen 80 columns wide."""
import json

import pytest
from moto import mock_aws

from orchestrator.cli.check import check_command
from tests.support.aws_api_server import AwsApis
from tests.support.cli import invoke
from tests.support.gce_catalog_server import GceCatalog


@pytest.fixture
def clouds(monkeypatch, tmp_path):
    """A new AWS account (0 vCPUs for GPU instances but 8 for G and VT on-demand in us-east-1) and a new GCP
    project (1 T4 in us-central1, none elsewhere), with fake credentials for both; a HOME of their own."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "dlrun-test")
    aws, gce = AwsApis(), GceCatalog()
    aws.applied = {"us-east-1": {"L-DB2E81BA": 8.0}}
    gce.add_region("us-central1", 3, CPUS=(24, 0), NVIDIA_T4_GPUS=(1, 0), PREEMPTIBLE_NVIDIA_T4_GPUS=(0, 0),
                   NVIDIA_L4_GPUS=(0, 0))
    gce.add_region("europe-north2", 3, CPUS=(24, 0))
    gce.project_quotas = {"GPUS_ALL_REGIONS": (0, 0), "CPUS_ALL_REGIONS": (32, 0)}
    with aws, gce, mock_aws():
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", aws.endpoint)
        monkeypatch.setenv("DLRUN_GCP_API_ENDPOINT", gce.endpoint)
        monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")
        monkeypatch.setenv("DLRUN_REFRESH_DEADLINE_S", "10")
        yield aws, gce


def test_check_lists_account_regions_and_gpu_quotas_of_both_clouds(clouds):
    aws, gce = clouds
    code, result = invoke(check_command, [])
    assert code == 0, result.output
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "aws: usable — account 123456789012" in out
    assert "environment variables AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY" in out
    assert "us-east-1" in out and "G and VT 8 (0) · P 0 (0)" in out  # on-demand 8 vCPUs, spot 0
    assert "gcp: usable — project dlrun-test (number 1234567890)" in out
    assert "emulator" in out and "L4 0 · T4 1 (0)" in out and "all GPUs 0" in out
    assert "no GPU quota has room" in out  # GPUS_ALL_REGIONS 0 rules out the T4 granted in us-central1
    assert "usable: aws, gcp (and local: this machine)" in out
    assert ("ListServiceQuotas", "us-east-1") in aws.calls and "project" in gce.calls


def test_check_json_names_account_regions_and_quotas(clouds):
    code, result = invoke(check_command, ["--cloud", "gcp", "--json"])
    assert code == 0, result.output
    report = json.loads(result.stdout)
    assert report["usable"] == ["gcp"] and list(report["clouds"]) == ["gcp"]
    gcp = report["clouds"]["gcp"]
    assert gcp["account"] == {"project": "dlrun-test", "number": "1234567890"}
    assert gcp["regions"] == ["europe-north2", "us-central1"] and gcp["gpu_regions"] == ["us-central1"]
    t4 = next(q for q in gcp["gpu_quotas"] if q["code"] == "NVIDIA_T4_GPUS")
    assert t4["limit"] == 1 and t4["region"] == "us-central1"


def test_refused_keys_are_not_usable_and_say_what_to_do(clouds):
    from moto.core import set_initial_no_auth_action_count

    @set_initial_no_auth_action_count(0)  # moto checks every key against IAM: "testing" is no user's
    def check():
        return invoke(check_command, ["--cloud", "aws"])

    code, result = check()
    assert code == 4, result.output
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "aws: not usable — refused" in out and "InvalidClientTokenId" in out
    assert "environment variables AWS_ACCESS_KEY_ID" in out and "aws configure" in out
    assert "aws is not usable" in str(result.exception)


def test_regions_that_cannot_be_listed_leave_the_project_usable(clouds, monkeypatch):
    aws, gce = clouds
    monkeypatch.setenv("DLRUN_REFRESH_DEADLINE_S", "2")
    gce.throttle("regions", 1000)  # regions.list keeps answering 403 rateLimitExceeded
    code, result = invoke(check_command, ["--cloud", "gcp"])
    assert code == 0, result.output
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "gcp: usable — project dlrun-test" in out
    assert "regions       not listed (throttled (HTTP 429)" in out
    assert "the catalog's with GPU offers: 4 (europe-west4," in " ".join(out.split())
    assert "not read: us-central1: throttled" in out


def test_dlrun_check_as_a_process_in_a_fresh_home(tmp_path):
    """The console script as a new user runs it: HOME and DLRUN_HOME empty, no cloud variable set."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    dlrun = Path(sys.executable).with_name("dlrun")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DLRUN_HOME": str(tmp_path / ".dlrun"),
           "DLRUN_LOCAL_GPUS": "none", "COLUMNS": "80"}
    proc = subprocess.run([str(dlrun), "check"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4, proc.stderr
    assert all(len(line) <= 80 for line in proc.stdout.splitlines()), proc.stdout
    assert "aws: not usable" in proc.stdout and "gcp: not usable" in proc.stdout and "local: usable" in proc.stdout
    assert proc.stderr.strip().splitlines() == ["dlrun: error: no cloud is usable (the fixes are above); "
                                                "`--backend local` runs jobs on this machine"]


def test_a_project_that_does_not_answer_is_not_usable_and_says_to_try_again(clouds, monkeypatch):
    aws, gce = clouds
    monkeypatch.setenv("DLRUN_REFRESH_DEADLINE_S", "2")
    gce.throttle("project", 1000)  # projects.get keeps answering 403 rateLimitExceeded
    code, result = invoke(check_command, ["--cloud", "gcp"])
    assert code == 4, result.output
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert out.startswith("gcp: not usable — throttled") or out.startswith("gcp: not usable — timed out"), out
    assert "run `dlrun check` again" in " ".join(out.split()) and "log in again" not in out
