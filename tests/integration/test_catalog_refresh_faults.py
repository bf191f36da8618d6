"""`dlrun catalog refresh` and `dlrun catalog quotas` under faults: every API they read (each a row of
SOURCES) x every way an answer goes wrong (tests/support/fault_proxy.FAULTS), through the real clients
(botocore against moto's server and the fake Price List / Service Quotas, google-cloud-compute and requests
against the fake Compute Engine and Cloud Billing) with a fault proxy in between. In every cell the source's
previous rows stay byte for byte with their fetch time, the user gets one line naming the source and what
went wrong, the retries stop (the calls the proxy saw are few), and the exit code is the documented one.

The deadline is the users' own setting, DLRUN_REFRESH_DEADLINE_S, set short here so that the matrix runs in
seconds; the fakes answer a healthy call in milliseconds.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner

from infra.refresh import cache
from infra.refresh.bounds import MAX_ATTEMPTS
from orchestrator.cli import plan as cli_plan
from orchestrator.errors import DlrunError
from tests.support.aws_api_server import AwsApis
from tests.support.catalog_world import aws_price_items, aws_types, gcp_world, seed_spot_history, spot_history
from tests.support.fault_proxy import FAULTS, FaultProxy

REGION = "us-east-1"
DEADLINE_S = "1"  # each source's deadline in the faulted runs: call timeouts 0.25 s (connect) / 0.5 s (read)


@dataclass(frozen=True)
class Source:
    api: str           # the operation, as the proxy names it
    proxy: str         # which proxy it goes through
    command: tuple     # the dlrun command that reads it (catalog ...)
    unit: tuple        # the cache unit it fills: (cloud, kind, region); kind "regions": every AWS unit
    paged: bool = True

    @property
    def id(self) -> str:
        return f"{self.proxy}:{self.api}"


REFRESH_AWS = ("refresh", "--cloud", "aws", "--region", REGION, "--stale-only")
REFRESH_GCP = ("refresh", "--cloud", "gcp", "--stale-only")
QUOTAS_AWS = ("quotas", "--cloud", "aws", "--region", REGION)
QUOTAS_GCP = ("quotas", "--cloud", "gcp", "--region", "us-central1")
SOURCES = [
    Source("DescribeRegions", "ec2", ("refresh", "--cloud", "aws", "--stale-only"), ("aws", "regions", ""),
           paged=False),
    Source("DescribeInstanceTypes", "ec2", REFRESH_AWS, ("aws", "specs", REGION)),
    Source("DescribeInstanceTypeOfferings", "ec2", REFRESH_AWS, ("aws", "offerings", REGION)),
    Source("DescribeSpotPriceHistory", "ec2", REFRESH_AWS, ("aws", "spot", REGION)),
    Source("GetProducts", "aws-json", REFRESH_AWS, ("aws", "ondemand", REGION)),
    Source("ListServiceQuotas", "aws-json", QUOTAS_AWS, ("aws", "quotas", REGION)),
    Source("ListAWSDefaultServiceQuotas", "aws-json", QUOTAS_AWS, ("aws", "quotas", REGION)),
    Source("DescribeInstances", "ec2", QUOTAS_AWS, ("aws", "quotas", REGION)),
    Source("services.skus.list", "billing", REFRESH_GCP, ("gcp", "ondemand", "global")),
    Source("machineTypes.aggregatedList", "gce", REFRESH_GCP, ("gcp", "specs", "global")),
    Source("acceleratorTypes.aggregatedList", "gce", REFRESH_GCP, ("gcp", "offerings", "global")),
    Source("regions.list", "gce", REFRESH_GCP, ("gcp", "specs", "zones")),
    Source("regions.list", "gce", QUOTAS_GCP, ("gcp", "quotas", "us-central1")),
    Source("projects.get", "gce", QUOTAS_GCP, ("gcp", "quotas", "global"), paged=False),
]
# a page token in an answer that is not a list is not read: the call succeeds
CELLS = [pytest.param(s, f, id=f"{s.command[0]}-{s.id}-{f}") for s in SOURCES for f in FAULTS
         if f != "repeat_token" or s.paged]


def invoke(*args):
    result = CliRunner().invoke(cli_plan.catalog_group, list(args))
    code = result.exception.exit_code if isinstance(result.exception, DlrunError) else result.exit_code
    return code, result


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The fakes behind their proxies, and a catalog every source has filled once (the previous rows)."""
    from moto.server import ThreadedMotoServer

    mp = pytest.MonkeyPatch()
    ec2_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    ec2_server.start()
    host, port = ec2_server.get_host_and_port()
    gce, billing = gcp_world(2)
    aws = AwsApis()
    aws.hidden = {"L-DB2E81BA"}  # ListServiceQuotas leaves it out: the defaults are read too
    with gce, billing, aws:
        proxies = {"ec2": FaultProxy(upstream=f"http://{host}:{port}", protocol="ec2"),
                   "aws-json": FaultProxy(upstream=aws.endpoint, protocol="aws-json"),
                   "gce": FaultProxy(upstream=gce.endpoint), "billing": FaultProxy(upstream=billing.endpoint)}
        for p in proxies.values():
            p.start()
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
               "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL_EC2": proxies["ec2"].endpoint,
               "AWS_ENDPOINT_URL_PRICING": proxies["aws-json"].endpoint,
               "AWS_ENDPOINT_URL_SERVICE_QUOTAS": proxies["aws-json"].endpoint,
               "DLRUN_GCP_API_ENDPOINT": proxies["gce"].endpoint,
               "DLRUN_GCP_BILLING_ENDPOINT": proxies["billing"].endpoint, "DLRUN_GCP_EMULATOR": "1",
               "GOOGLE_CLOUD_PROJECT": gce.project, "DLRUN_LOCAL_GPUS": "none",
               "DLRUN_HOME": str(tmp_path_factory.mktemp("filled-home"))}
        for k, v in env.items():
            mp.setenv(k, v)
        types = aws_types(boto3.client("ec2", region_name=REGION, endpoint_url=f"http://{host}:{port}"))
        aws.price_items = aws_price_items(types, [REGION], others_per_region=10)
        seed_spot_history(mp, spot_history(types, [REGION], {REGION: [f"{REGION}a", f"{REGION}b"]}))
        for args in (REFRESH_AWS[:-1], REFRESH_GCP[:-1], QUOTAS_AWS, QUOTAS_GCP):
            code, result = invoke(*args)
            assert code == 0, result.output
        home = Path(env["DLRUN_HOME"])
        filled = {p.relative_to(home): p.read_bytes() for p in home.rglob("*") if p.is_file()}
        yield {"env": env, "proxies": proxies, "filled": filled}
        for p in proxies.values():
            p.stop()
    ec2_server.stop()
    mp.undo()


@pytest.fixture
def filled(world, dlrun_home, monkeypatch):
    """This test's $DLRUN_HOME with the filled catalog, short deadlines, and no fault yet."""
    for k, v in world["env"].items():
        if k != "DLRUN_HOME":
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("DLRUN_REFRESH_DEADLINE_S", DEADLINE_S)
    for rel, data in world["filled"].items():
        (dlrun_home / rel).parent.mkdir(parents=True, exist_ok=True)
        (dlrun_home / rel).write_bytes(data)
    for p in world["proxies"].values():
        p.clear()
    return world


def age(cloud: str, kind: str, region: str) -> None:
    """Make one unit older than its lifetime, so that the command reads it (and nothing else) again."""
    units = cache.load(cloud, kind)
    units[region].fetched_at -= cache.LIFETIME_S[kind] + 60
    cache.save(cloud, kind, units)


def snapshot(cloud: str, kind: str, region: str) -> tuple[float, str]:
    u = cache.load(cloud, kind)[region]
    return u.fetched_at, json.dumps(u.rows, sort_keys=True)


def every_aws_file() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in cache.path("aws", "specs").parent.glob("aws-*.json")}


@pytest.mark.parametrize("source, fault", CELLS)
def test_a_fault_keeps_the_previous_rows_says_so_in_one_line_and_ends(filled, source, fault):
    cloud, kind, region = source.unit
    proxy = filled["proxies"][source.proxy]
    if kind == "regions":
        before_files = every_aws_file()
    else:
        age(cloud, kind, region)
        before = snapshot(cloud, kind, region)
    proxy.inject(source.api, fault)
    code, result = invoke(*source.command)
    out = result.output

    assert "Traceback" not in out and not isinstance(result.exception, (AttributeError, TypeError, KeyError))
    assert proxy.hits.get(source.api, 0) <= 12, proxy.hits  # retries are bounded (a stall made 51 calls)
    if kind == "regions":
        assert code == 7, out  # nothing refreshed
        assert [x for x in out.splitlines() if x.startswith("aws regions: FAILED (")], out
        assert every_aws_file() == before_files
        return
    fetched_at, rows = before
    after = snapshot(cloud, kind, region)
    assert after == (fetched_at, rows), f"{source.id} {fault}: the previous rows changed"
    error = cache.load(cloud, kind)[region].error
    assert error and error.split(" ")[0] in ("throttled", "unavailable", "timed", "connection", "unreadable",
                                             "wrong"), error
    if source.command[0] == "refresh":
        what = f"{cloud} {kind}{'' if region in ('global',) else ' ' + region}: FAILED ("
        lines = [x for x in out.splitlines() if x.startswith(what)]
        assert len(lines) == 1 and "kept the" in lines[0] and " ago" in lines[0], out
        assert code == 7, out  # the one source due failed: nothing refreshed
    else:
        lines = [x for x in out.splitlines() if x.startswith(f"{cloud} {region}: ")]
        assert len(lines) == 1 and "showing what was read" in lines[0], out
        assert code == 7, out  # the one read due failed; what was read before is shown, with its age


ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")


def test_some_sources_failing_is_exit_6_and_json_gives_each_sources_outcome(filled, monkeypatch):
    # room for boto3's three tries and their backoff (up to ~3 s): with the matrix's 1 s the 503 can end as
    # "timed out ... (the last try: unavailable ...)" instead, which is right too but not what this test reads
    monkeypatch.setenv("DLRUN_REFRESH_DEADLINE_S", "10")
    filled["proxies"]["aws-json"].inject("GetProducts", "http503")
    kept = snapshot("aws", "ondemand", REGION)
    code, result = invoke(*REFRESH_AWS[:-1], "--json")
    assert code == 6, result.output
    report = json.loads(result.stdout)
    by_kind = {s["kind"]: s for s in report["sources"]}
    od = by_kind["ondemand"]
    assert (od["ok"], od["status"], od["rows"]) == (False, "kept", len(json.loads(kept[1])))
    assert od["error"].startswith("unavailable (ServiceUnavailable HTTP 503)") and ISO.match(od["fetched_at"])
    assert all(by_kind[k]["ok"] and by_kind[k]["status"] == "fetched" and by_kind[k]["error"] is None
               and ISO.match(by_kind[k]["fetched_at"]) for k in ("specs", "offerings", "spot"))
    assert report["outcome"] == "partial" and snapshot("aws", "ondemand", REGION) == kept


def test_credentials_the_cloud_refuses_are_exit_4_and_any_other_total_failure_exit_7(filled):
    ec2, json_apis = filled["proxies"]["ec2"], filled["proxies"]["aws-json"]
    for api in ("DescribeInstanceTypes", "DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory"):
        ec2.inject(api, "refused")
    json_apis.inject("GetProducts", "refused")
    code, result = invoke(*REFRESH_AWS[:-1])
    assert code == 4 and "refused the credentials" in str(result.exception), result.output
    assert "aws ondemand us-east-1: FAILED (refused (UnrecognizedClientException HTTP 400)" in result.output
    json_apis.inject("GetProducts", "http500")  # one source failed otherwise: not a credentials problem
    code, result = invoke(*REFRESH_AWS[:-1])
    assert code == 7 and "nothing refreshed" in str(result.exception), result.output


def test_catalog_quotas_exits_4_when_the_cloud_refuses_every_read(filled):
    age("aws", "quotas", REGION)
    before = snapshot("aws", "quotas", REGION)
    filled["proxies"]["aws-json"].inject("ListServiceQuotas", "refused")
    code, result = invoke(*QUOTAS_AWS)
    assert code == 4 and "refused the credentials" in str(result.exception), result.output
    assert snapshot("aws", "quotas", REGION) == before


def test_catalog_quotas_exits_6_when_some_reads_fail(filled):
    age("aws", "quotas", REGION)
    age("gcp", "quotas", "us-central1")
    filled["proxies"]["aws-json"].inject("ListServiceQuotas", "http503")
    code, result = invoke("quotas", "--region", REGION, "--region", "us-central1")
    assert code == 6 and "1 of 2 reads failed" in str(result.exception), result.output


def test_an_unreadable_quota_answer_is_unknown_never_zero_nor_the_default(filled, dlrun_home):
    cache.path("aws", "quotas").unlink()  # never read before
    filled["proxies"]["aws-json"].inject("ListServiceQuotas", "cut_off")
    code, result = invoke(*QUOTAS_AWS, "--json")
    assert code == 7 and "nothing read" in str(result.exception), result.output
    data = json.loads(result.stdout[result.stdout.index("{"):])
    assert not [q for q in data["quotas"] if q["cloud"] == "aws"]  # G and VT: unknown, not AWS's default 0
    unit = next(u for u in data["units"] if u["cloud"] == "aws" and u["region"] == REGION)
    assert unit["error"].startswith("unreadable answer: ListServiceQuotas answered HTTP 200")
    assert unit["fetched_at"] is None
    assert "ListAWSDefaultServiceQuotas" not in filled["proxies"]["aws-json"].hits


def test_a_plan_whose_refresh_meets_a_503_plans_with_the_cached_rows_and_a_note(filled, tmp_path, monkeypatch):
    import yaml

    monkeypatch.setenv("DLRUN_PLAN_REFRESH_DEADLINE_S", "1.5")
    age("aws", "spot", REGION)
    kept = snapshot("aws", "spot", REGION)
    proxy = filled["proxies"]["ec2"]
    proxy.inject("DescribeSpotPriceHistory", "http503")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "resources": {"clouds": ["aws"], "regions": [REGION]},
                                   "workload": {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8],
                                                "batch_size": 32, "dataset_size": 320, "epochs": 2}}))
    result = CliRunner().invoke(cli_plan.plan_command, [str(job), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout[result.stdout.index("{"):])
    note = next(n for n in plan["notes"] if n.startswith("refresh: 1 source(s) failed, planned with their cached"))
    assert "aws spot us-east-1: FAILED (unavailable (Unavailable HTTP 503)" in note
    assert snapshot("aws", "spot", REGION) == kept and proxy.hits["DescribeSpotPriceHistory"] <= 2 * MAX_ATTEMPTS
