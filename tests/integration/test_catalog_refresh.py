"""`dlrun catalog refresh` from the clouds' own APIs, through the real clients: moto's EC2 (regions, instance
types with GpuInfo, offerings; a seeded spot history), the fake Service Quotas / Price List server, the fake
Compute Engine (regions, machine and accelerator types, quotas) and the fake Cloud Billing Catalog."""
import datetime as dt
import json
import shutil
import time

import boto3
import pytest
import yaml
from click.testing import CliRunner
from moto import mock_aws

from configs import CATALOG_DIR
from infra.catalog import load_offers
from infra.refresh import cache
from orchestrator.cli import plan as cli_plan
from orchestrator.errors import DlrunError
from tests.support.aws_api_server import AwsApis
from tests.support.catalog_world import (GCP_GPUS, SERIES, aws_od_price, aws_price_items, aws_types, gcp_world,
                                       seed_spot_history, spot_history)

AWS_REGIONS = ["us-east-1", "eu-north-1"]  # eu-north-1: a region the shipped snapshot lacks
TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


@pytest.fixture
def world(monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "dlrun-test")
    gce, billing = gcp_world(6)  # us-central1 ... us-west1; us-east5 has A100-80GB, absent from the snapshot
    billing.page_cap = 250       # the SKU list spans pages
    gce.page_cap = 100           # ... and so do the aggregated lists
    aws = AwsApis()
    with mock_aws(), gce, billing, aws:
        ec2 = boto3.client("ec2", region_name="us-east-1")
        types = aws_types(ec2)
        aws.price_items = aws_price_items(types, AWS_REGIONS, others_per_region=50)
        seed_spot_history(monkeypatch, spot_history(types, AWS_REGIONS, {r: [f"{r}a", f"{r}b", f"{r}c"]
                                                                          for r in AWS_REGIONS}))
        monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", aws.endpoint)
        monkeypatch.setenv("AWS_ENDPOINT_URL_SERVICE_QUOTAS", aws.endpoint)
        monkeypatch.setenv("DLRUN_GCP_API_ENDPOINT", gce.endpoint)
        monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")
        monkeypatch.setenv("DLRUN_REFRESH_DEADLINE_S", "8")  # a throttled source gives up within seconds
        monkeypatch.setenv("DLRUN_GCP_BILLING_ENDPOINT", billing.endpoint)
        yield {"aws": aws, "gce": gce, "billing": billing, "types": {t["InstanceType"]: t for t in types}}


def invoke(command, args):
    result = CliRunner().invoke(command, args)
    code = result.exception.exit_code if isinstance(result.exception, DlrunError) else result.exit_code
    return code, result


def refresh(*extra):
    args = ["refresh", *[a for r in AWS_REGIONS for a in ("--region", r)], *extra]
    return invoke(cli_plan.catalog_group, args)


def test_refresh_reads_both_clouds_and_every_price_carries_its_source_and_time(world):
    code, result = refresh()
    assert code == 0, result.output
    offers = load_offers()
    g4dn = next(o for o in offers if o.key == "aws/us-east-1/g4dn.xlarge")
    assert g4dn.price_per_hour == pytest.approx(aws_od_price(world["types"]["g4dn.xlarge"]))
    assert g4dn.source.startswith("aws pricing:GetProducts fetched ") and g4dn.extra["fetched_at"] > time.time() - 60
    assert g4dn.extra["spot_source"] == "aws ec2:DescribeSpotPriceHistory"
    # the latest Linux record of the cheapest regular zone (the older and the Windows records are not used)
    assert g4dn.spot_price_per_hour == pytest.approx(round(aws_od_price(world["types"]["g4dn.xlarge"]) * 0.35, 4),
                                                     abs=1e-4)
    assert any(o.cloud == "aws" and o.region == "eu-north-1" for o in offers)          # a region the snapshot lacked
    # every zone is kept; p4d's zone far below the others is flagged and does not set the price
    p4d = next(o for o in offers if o.key == "aws/us-east-1/p4d.24xlarge")
    ranking = p4d.extra["spot_zones"]
    assert [z.zone for z in ranking.outliers] == ["us-east-1a"] and ranking.launch_zone.zone == "us-east-1b"
    assert p4d.spot_price_per_hour == ranking.launch_zone.price
    gpus = {o.accelerator for o in offers if o.cloud == "aws"}
    assert {"A100-80GB", "V100-32GB", "H200", "L40S"} <= gpus                          # GpuInfo: no code change
    assert not any(o.instance_type.startswith("g6f.") for o in offers)                 # fractional GPUs left out
    assert not any(o.instance_type.startswith("g5g.") for o in offers)                 # arm64
    # GCP: a2-ultragpu-1g in us-east5 (neither in the snapshot) = 12 vCPUs + 170 GiB of A2 + one A100 80GB
    a2 = next(o for o in offers if o.key == "gcp/us-east5/a2-ultragpu-1g")
    _, core, ram = SERIES["A2"]
    assert a2.accelerator == "A100-80GB" and a2.accelerator_count == 1
    assert a2.price_per_hour == pytest.approx(12 * core + 170 * ram + GCP_GPUS["nvidia-a100-80gb"][1], abs=1e-4)
    assert a2.spot_price_per_hour == pytest.approx(0.3 * (12 * core + 170 * ram) + GCP_GPUS["nvidia-a100-80gb"][2],
                                                   abs=1e-4)
    assert a2.source.startswith("gcp cloudbilling:services.skus.list fetched ")
    t4 = [o for o in offers if o.cloud == "gcp" and o.region == "us-central1" and o.accelerator == "T4"]
    assert sorted((o.instance_type, o.accelerator_count) for o in t4) == [
        ("n1-standard-32", 4), ("n1-standard-4", 1), ("n1-standard-8", 1), ("n1-standard-8", 2)]  # up to 4 cards
    assert not any(o.region == "us-east1" and o.accelerator in ("V100", "A100") for o in offers)
    assert world["billing"].calls >= 2 and world["gce"].calls.count("machineTypes") >= 2  # pages followed
    assert world["aws"].calls.count(("GetProducts", "us-east-1")) >= 2


def test_the_plan_uses_the_fetched_prices_a_new_region_and_a_gpu_the_snapshot_lacked(world, tmp_path):
    assert refresh()[0] == 0
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": TINY,
                                    "resources": {"clouds": ["gcp"], "accelerators": "A100-80GB:1"}}))
    code, result = invoke(cli_plan.plan_command, [str(path), "--json"])
    assert code == 0, result.output
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    assert plan["chosen"]["instance_type"] == "a2-ultragpu-1g"
    assert any(n.startswith("price of the choice: gcp cloudbilling:services.skus.list, fetched ") for n in plan["notes"])
    assert plan["chosen"]["price_date"] == time.strftime("%Y-%m-%d", time.gmtime())
    assert plan["chosen"]["price_source"].startswith("gcp cloudbilling:services.skus.list")
    fetched = dt.datetime.fromisoformat(plan["chosen"]["price_fetched_at"])  # ISO 8601 with its UTC offset
    assert fetched.utcoffset() is not None and time.time() - fetched.timestamp() < 120


def test_a_failed_source_keeps_its_previous_rows_and_says_so(world):
    code, result = refresh()
    assert code == 0, result.output
    before = {o.key: o.price_per_hour for o in load_offers() if o.cloud == "gcp"}
    world["billing"].throttle(100)
    world["aws"].throttle("pricing", 1000)
    code, result = refresh()
    assert code == 6, result.output  # some sources failed, the others were refreshed
    assert "gcp ondemand: FAILED (throttled (RESOURCE_EXHAUSTED HTTP 429)" in result.output
    assert "kept the 216 rows fetched" in result.output
    line = next(x for x in result.output.splitlines() if x.startswith("aws ondemand us-east-1: FAILED"))
    assert "throttled (ThrottlingException HTTP 400)" in line and "kept the 119 rows fetched" in line
    after = {o.key: o.price_per_hour for o in load_offers() if o.cloud == "gcp"}
    assert after == before and any(o.key == "aws/eu-north-1/g4dn.xlarge" for o in load_offers())


def test_a_source_that_never_worked_leaves_the_snapshot_standing(world):
    world["billing"].throttle(100)
    code, result = refresh("--cloud", "gcp")
    assert code == 6 and "nothing fetched before: the snapshot stands" in result.output
    assert any(o.key == "gcp/us-central1/n1-standard-4" and o.price_date == "2025-07-01" for o in load_offers())


def test_a_plan_refreshes_what_is_past_its_lifetime_with_a_progress_line(world, tmp_path):
    assert refresh()[0] == 0
    units = cache.load("aws", "spot")
    for u in units.values():
        u.fetched_at -= cache.LIFETIME_S["spot"] + 60
    cache.save("aws", "spot", units)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": TINY, "resources": {"clouds": ["aws"]}}))
    calls = len(world["aws"].calls)
    code, result = invoke(cli_plan.plan_command, [str(path), "--json"])
    assert code == 0, result.output
    assert "refreshing aws" in result.stderr
    assert all(u.fresh() for u in cache.load("aws", "spot").values())
    assert not [c for c in world["aws"].calls[calls:] if c[0] == "GetProducts"]  # on-demand prices still fresh


def test_refresh_without_credentials_is_one_line_and_exit_4(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    for v in ("AWS_ACCESS_KEY_ID", "DLRUN_GCP_API_ENDPOINT", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(v, raising=False)
    code, result = invoke(cli_plan.catalog_group, ["refresh"])
    assert code == 4 and "nothing refreshed: aws: no AWS credentials found" in str(result.exception)


def test_refresh_keeps_the_zones_a_gcp_launch_needs(world):
    from infra.refresh.zones import gcp_gpu_zones, gcp_region_zones

    assert refresh("--cloud", "gcp")[0] == 0
    assert gcp_region_zones()["us-east5"] == ["us-east5-a", "us-east5-b", "us-east5-c"]
    zones = gcp_gpu_zones()
    assert zones[("A100-80GB", "us-east5")] == ["us-east5-a", "us-east5-b", "us-east5-c"]
    assert ("T4", "us-east1") in zones and ("V100", "us-east1") not in zones


def test_billing_skus_are_read_as_google_writes_them():
    from infra.refresh.gcp_prices import parse_skus
    from tests.support.billing_catalog_server import sku

    regions = ["us-central1", "us-east1"]
    skus = [sku("A", "N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", regions, 0.031611,
                nanos_only=True),
            sku("B", "Spot Preemptible N2 Instance Ram running in Americas", "RAM", "Preemptible", regions, 0.00127,
                "GiBy.h"),
            sku("C", "Nvidia Tesla A100 80GB GPU attached to Spot Preemptible VMs running in Americas", "GPU",
                "Preemptible", regions, 1.57),
            sku("D", "Nvidia L4 GPU running in Americas", "GPU", "OnDemand", regions, 0.56),
            sku("E", "N2 Custom Instance Core running in Americas", "CPU", "OnDemand", regions, 0.9),
            sku("F", "N1 Sole Tenancy Instance Core running in Americas", "CPU", "OnDemand", regions, 0.9),
            sku("G", "Commitment v1: N1 Cpu in Americas for 1 Year", "CPU", "Commit1Yr", regions, 0.9),
            sku("H", "Nvidia H100 80GB GPU running on DWS Defined Duration in Americas", "GPU", "OnDemand", regions, 9.0)]
    rows = parse_skus(skus)
    got = {(r["part"], r["what"], r["spot"], r["region"]): round(r["price"], 6) for r in rows}
    assert got == {("core", "N1", False, "us-central1"): 0.031611, ("core", "N1", False, "us-east1"): 0.031611,
                   ("ram", "N2", True, "us-central1"): 0.00127, ("ram", "N2", True, "us-east1"): 0.00127,
                   ("gpu", "80GB A100", True, "us-central1"): 1.57, ("gpu", "80GB A100", True, "us-east1"): 1.57,
                   ("gpu", "L4", False, "us-central1"): 0.56, ("gpu", "L4", False, "us-east1"): 0.56}
    assert "units" not in skus[0]["pricingInfo"][0]["pricingExpression"]["tieredRates"][0]["unitPrice"]


def test_a_new_aws_gpu_is_planned_once_its_datasheet_is_known_and_listed_with_the_reason_until_then(
        world, tmp_path, monkeypatch):
    world["aws"].set_quota("us-east-1", "L-DB2E81BA", 64)
    world["aws"].set_quota("us-east-1", "L-417A185B", 384)
    assert refresh("--cloud", "aws")[0] == 0
    path = tmp_path / "job.yaml"
    for gpu, expect in (("L40S:1", "g6e."), (None, None)):
        if expect is None:  # a GPU table from before the B200's datasheet row (DLRUN_CATALOG_DIR)
            older = tmp_path / "catalog"
            shutil.copytree(CATALOG_DIR, older)
            rows = (older / "gpus.csv").read_text().splitlines(keepends=True)
            (older / "gpus.csv").write_text("".join(r for r in rows if not r.startswith("B200,")))
            monkeypatch.setenv("DLRUN_CATALOG_DIR", str(older))
        wish = {"accelerators": gpu} if gpu else {}
        path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": TINY,
                                        "resources": {"clouds": ["aws"], "regions": ["us-east-1"], **wish}}))
        code, result = invoke(cli_plan.plan_command, [str(path), "--json", "--all"])
        plan = json.loads(result.stdout[result.stdout.index("{"):])
        if expect:
            assert code == 0 and plan["chosen"]["instance_type"].startswith(expect), result.output[-500:]
        else:
            b200 = next(c for c in plan["candidates"] if c["accelerator"] == "B200" and c["region"] == "us-east-1")
            assert "no datasheet figures" in b200["reason"]


def test_catalog_gpu_takes_every_gpu_the_catalog_prints(world):
    assert refresh("--cloud", "aws")[0] == 0
    code, result = invoke(cli_plan.catalog_group, [])
    assert code == 0 and "8×B200" in result.output  # a GPU type the refresh found, gpus.csv lacks
    for gpu in ("B200", "b200", "B200x8", "B200:8", "8×B200", "8xB200"):
        code, result = invoke(cli_plan.catalog_group, ["--gpu", gpu, "--cloud", "aws"])
        assert code == 0 and "8×B200" in result.output and "×T4" not in result.output, (gpu, result.output)
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "B20"])
    assert code == 2 and "did you mean B200" in str(result.exception)
