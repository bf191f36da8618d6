"""Quotas in the plan: the account's EC2 vCPU buckets (Service Quotas + running instances) and GCP's
regional / project quotas, read through the real boto3 and google-cloud-compute clients against fakes
(tests/support/aws_api_server.py, tests/support/gce_catalog_server.py, moto for EC2)."""
import json
import time

import pytest
import yaml
from click.testing import CliRunner
from moto import mock_aws

from infra.catalog import load_offers
from infra.refresh import cache
from infra.refresh.clients import AwsClients
from orchestrator.cli import plan as cli_plan
from orchestrator.errors import DlrunError
from tests.support.aws_api_server import AwsApis
from tests.support.gce_catalog_server import GceCatalog

TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}
GCP_REGIONS = ("us-central1", "us-west1", "us-east1", "europe-west4")


def new_gcp_project(gce: GceCatalog, gpus_all_regions: float = 0) -> None:
    """A new project's quotas: GPUs per type granted per region, GPUS_ALL_REGIONS 0 (console default)."""
    for r in GCP_REGIONS:
        gce.add_region(r, 3, CPUS=(24, 0), N2_CPUS=(24, 0), E2_CPUS=(24, 0), C3_CPUS=(24, 0),
                       NVIDIA_T4_GPUS=(1, 0), PREEMPTIBLE_NVIDIA_T4_GPUS=(0, 0), NVIDIA_V100_GPUS=(1, 0),
                       NVIDIA_P100_GPUS=(1, 0), NVIDIA_A100_GPUS=(0, 0), NVIDIA_L4_GPUS=(1, 0),
                       PREEMPTIBLE_NVIDIA_H100_GPUS=(0, 0))
    gce.add_region("europe-north2", 3, CPUS=(24, 0))  # a region without any GPU
    gce.project_quotas = {"GPUS_ALL_REGIONS": (gpus_all_regions, 0), "CPUS_ALL_REGIONS": (32, 0)}


@pytest.fixture
def account(monkeypatch):
    """A new AWS account (G/VT and P: 0 vCPUs, both markets) and a new GCP project, behind the fakes."""
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "dlrun-test")
    aws, gce = AwsApis(), GceCatalog()
    new_gcp_project(gce)
    with aws, gce, mock_aws():
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", aws.endpoint)
        monkeypatch.setenv("DLRUN_GCP_API_ENDPOINT", gce.endpoint)
        monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")
        for deadline in ("DLRUN_REFRESH_DEADLINE_S", "DLRUN_PLAN_REFRESH_DEADLINE_S"):
            monkeypatch.setenv(deadline, "5")  # a throttled read gives up after 5 s of retries
        yield aws, gce


def job_file(tmp_path, **fields):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", **{"workload": TINY, **fields}}))
    return str(path)


def invoke(command, args):
    result = CliRunner().invoke(command, args)
    code = result.exception.exit_code if isinstance(result.exception, DlrunError) else result.exit_code
    return code, result


def test_zero_gpu_quota_plan_exits_3_naming_the_quotas_to_raise_without_launching(account, tmp_path):
    aws, gce = account
    path = job_file(tmp_path, resources={"clouds": ["aws", "gcp"], "accelerators": "T4:1"})
    code, result = invoke(cli_plan.plan_command, [path, "--json"])
    assert code == 3, result.output
    assert "quotas rule out every candidate" in str(result.exception)
    assert "L-DB2E81BA" in str(result.exception) and "GPUS_ALL_REGIONS" in str(result.exception)
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    g4dn = next(c for c in plan["candidates"] if c["key"] == "aws/us-east-1/g4dn.xlarge" and not c["spot"])
    assert g4dn["reason"].startswith("quota: needs 4 vCPUs of aws L-DB2E81BA (Running On-Demand G and VT "
                                     "instances) in us-east-1: limit 0, in use 0")
    g4dn_spot = next(c for c in plan["candidates"] if c["key"] == "aws/us-east-1/g4dn.xlarge" and c["spot"])
    assert "L-3819A6DF" in g4dn_spot["reason"]  # the spot bucket, not the on-demand one
    t4 = next(c for c in plan["candidates"] if c["key"] == "gcp/us-central1/n1-standard-4")
    assert "GPUS_ALL_REGIONS" in t4["reason"] and "NVIDIA_T4_GPUS" not in t4["reason"]  # 1 T4 granted here
    assert ("ListServiceQuotas", "us-east-1") in aws.calls and "regions" in gce.calls and "project" in gce.calls


def test_zero_gpu_quota_chooses_a_cpu_offer_and_every_gpu_row_names_its_quota(account, tmp_path):
    path = job_file(tmp_path, resources={"clouds": ["aws", "gcp"]})
    code, result = invoke(cli_plan.plan_command, [path, "--json"])
    assert code == 0, result.output
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    assert plan["chosen"]["accelerator"] is None
    by_quota = {c["cloud"] for c in plan["candidates"] if c["accelerator"] and c["reason"].startswith("quota: ")}
    assert by_quota == {"aws", "gcp"}
    assert not [c for c in plan["candidates"] if c["accelerator"] and c["eligible"]]


def test_granted_quota_and_usage_decide_and_spot_uses_its_own_bucket(account, tmp_path):
    aws, gce = account
    aws.set_quota("us-east-1", "L-DB2E81BA", 8)   # on-demand G: 8 vCPUs ...
    import boto3

    ec2 = boto3.client("ec2", region_name="us-east-1")
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    ec2.run_instances(ImageId=ami, InstanceType="g4dn.xlarge", MinCount=1, MaxCount=1)  # ... 4 in use
    offers = [o for o in load_offers() if o.region == "us-east-1" and o.instance_type in ("g4dn.xlarge", "g4dn.2xlarge")]
    from orchestrator.planning.catalog_refresh import quota_book

    book = quota_book({"aws": {"us-east-1"}})
    small, big = sorted(offers, key=lambda o: o.vcpus)
    assert book.blocked(small, spot=False) is None                     # 4 free, needs 4
    assert "limit 8, in use 4" in book.blocked(big, spot=False)        # needs 8
    assert "L-3819A6DF" in book.blocked(small, spot=True)              # spot G/VT is still 0
    assert book.blocked(small, spot=False, nodes=2) is not None        # two nodes need 8


def test_a_quota_listservicequotas_omits_comes_from_the_defaults(account):
    aws, _ = account
    aws.hidden = {"L-DB2E81BA"}
    from orchestrator.planning.catalog_refresh import quota_book

    book = quota_book({"aws": {"us-east-1"}})
    q = next(q for q in book.all_quotas() if q.code == "L-DB2E81BA")
    assert (q.limit, q.source) == (0.0, "ListAWSDefaultServiceQuotas")
    assert ("ListAWSDefaultServiceQuotas", "us-east-1") in aws.calls


def test_throttling_and_missing_metrics_are_unknown_never_zero(account, tmp_path):
    aws, gce = account
    aws.throttle("us-east-1")
    gce.throttle("project", 1000)
    from orchestrator.planning.catalog_refresh import quota_book

    offers = load_offers()
    book = quota_book({"aws": {"us-east-1", "us-west-2"}, "gcp": {"us-central1"}},
                      clients={"aws": AwsClients(max_attempts=1)})
    g4dn = next(o for o in offers if o.key == "aws/us-east-1/g4dn.xlarge")
    assert book.blocked(g4dn, spot=False) is None and "throttled" in book.unknown(g4dn, False)[0]
    assert book.blocked(next(o for o in offers if o.key == "aws/us-west-2/g4dn.xlarge"), spot=False)
    t4 = next(o for o in offers if o.key == "gcp/us-central1/n1-standard-4")
    assert book.blocked(t4, spot=False) is None  # GPUS_ALL_REGIONS unknown (throttled), NVIDIA_T4_GPUS 1 free
    assert any("throttled" in w for w in book.unknown(t4, False))
    # a throttled region keeps what was read before; a failed read is tried again on the next plan
    assert not cache.load("aws", "quotas")["us-east-1"].fetched_at


def test_gcp_spot_falls_back_to_the_standard_quota_and_h100_is_unknown(account):
    _, gce = account
    gce.project_quotas["GPUS_ALL_REGIONS"] = (8, 0)
    from dataclasses import replace

    from orchestrator.planning.catalog_refresh import quota_book

    book = quota_book({"gcp": {"us-central1"}})
    t4 = next(o for o in load_offers() if o.key == "gcp/us-central1/n1-standard-4")
    assert book.blocked(t4, spot=True) is None  # PREEMPTIBLE_NVIDIA_T4_GPUS 0: Spot VMs use NVIDIA_T4_GPUS (1)
    assert "NVIDIA_T4_GPUS" in book.blocked(replace(t4, accelerator_count=2), spot=True)
    h100 = replace(t4, instance_type="a3-highgpu-1g", accelerator="H100", accelerator_count=1, vcpus=8)
    assert book.blocked(h100, spot=False) is None
    assert any("NVIDIA_H100_80GB_GPUS not reported" in w for w in book.unknown(h100, False))


def test_quotas_are_cached_for_an_hour_and_reread_before_a_launch(account):
    aws, gce = account
    from orchestrator.planning.catalog_refresh import quota_book

    quota_book({"aws": {"us-east-1"}, "gcp": {"us-central1"}})
    n_aws, n_gce = len(aws.calls), len(gce.calls)
    quota_book({"aws": {"us-east-1"}, "gcp": {"us-central1"}})              # a plan: within the hour
    assert (len(aws.calls), len(gce.calls)) == (n_aws, n_gce)
    units = cache.load("aws", "quotas")
    units["us-east-1"].fetched_at -= cache.LAUNCH_QUOTA_AGE_S + 1
    cache.save("aws", "quotas", units)
    quota_book({"aws": {"us-east-1"}}, max_age_s=cache.LAUNCH_QUOTA_AGE_S)  # a launch: read again
    assert len(aws.calls) > n_aws


def test_catalog_quotas_lists_them_and_says_what_is_unknown(account):
    aws, gce = account
    gce.throttle("regions", 1000)
    code, result = invoke(cli_plan.catalog_group, ["quotas"])
    assert code == 6 and "reads failed" in str(result.exception), result.output  # GCP's regions: some failed
    out = result.output
    assert "L-DB2E81BA" in out and "GPUS_ALL_REGIONS" in out and "throttled" in out
    code, result = invoke(cli_plan.catalog_group, ["quotas", "--json", "--cloud", "gcp"])
    data = json.loads(result.stdout[result.stdout.index("{"):])
    g = next(q for q in data["quotas"] if q["code"] == "GPUS_ALL_REGIONS")
    assert (g["region"], g["limit"], g["usage"]) == ("global", 0.0, 0.0)


def test_no_credentials_leaves_quotas_unchecked_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setenv("HOME", str(tmp_path))
    for v in ("DLRUN_GCP_API_ENDPOINT", "GOOGLE_CLOUD_PROJECT", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(v, raising=False)
    path = job_file(tmp_path, resources={"clouds": ["aws", "gcp"]})
    started = time.time()
    code, result = invoke(cli_plan.plan_command, [path, "--json", "--any-cloud"])  # else exit 4: no credentials
    assert code == 0, result.output
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    assert any("no AWS credentials" in n for n in plan["notes"]) and time.time() - started < 30


def test_submit_with_zero_gpu_quota_exits_3_before_anything_is_recorded_or_launched(account, tmp_path):
    import boto3

    from orchestrator.errors import NothingFitsError
    from orchestrator.planning.spec import load_job
    from orchestrator.runs.executor import submit
    from orchestrator.state.db import Store

    spec = load_job(job_file(tmp_path, resources={"clouds": ["aws", "gcp"], "accelerators": "T4:1"}))
    store = Store()
    with pytest.raises(NothingFitsError) as err:
        submit(spec, store=store)
    assert "quotas rule out every candidate" in err.value.message and "L-DB2E81BA" in err.value.message
    assert not store.list_jobs()
    ec2 = boto3.client("ec2", region_name="us-east-1")
    assert not [r for r in ec2.describe_instances()["Reservations"]]


def test_a_failed_quota_read_is_not_retried_by_every_plan_but_is_before_a_launch(account):
    aws, _ = account
    from orchestrator.planning.catalog_refresh import quota_book

    aws.throttle("us-east-1", 1000)
    quota_book({"aws": {"us-east-1"}}, clients={"aws": AwsClients(max_attempts=1)})
    n = len(aws.calls)
    book = quota_book({"aws": {"us-east-1"}}, clients={"aws": AwsClients(max_attempts=1)})  # the next plan: not again
    assert len(aws.calls) == n and "throttled" in book.units[("aws", "us-east-1")].error
    quota_book({"aws": {"us-east-1"}}, clients={"aws": AwsClients(max_attempts=1)},
               max_age_s=cache.LAUNCH_QUOTA_AGE_S)
    assert len(aws.calls) > n                                                             # a launch: again
