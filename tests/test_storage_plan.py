"""Where each candidate's checkpoints go, decided by the planner; a local directory with a cloud is refused."""
from __future__ import annotations

import json

import pytest
import yaml

from infra.aws.storage import run_bucket_url
from infra.identity import owner_identity
from orchestrator.cli import plan as cli_plan
from orchestrator.errors import EXIT_BAD_INPUT, SpecError
from orchestrator.planning import planner, software
from orchestrator.planning.spec import parse_job
from orchestrator.planning.storage_plan import NODE_DISK
from tests.test_cli_plan import invoke, job_file
from tests.test_planner import CATALOG, PROFILE

REF = {"reference": {"accelerator": "T4", "hours": 1.0}}


def spec(**fields):
    return parse_job(yaml.safe_dump({"name": "t", "job": "cnn", **REF, **fields}))


def runnable(s, c) -> bool:
    """The model fits and the job's torch can use the GPU (else that reason comes first)."""
    return c.estimate.fits and software.exclusion_reason(s, c.offer) is None


def cands(plan, cloud, spot):
    return [c for c in plan.candidates if c.offer.cloud == cloud and c.spot == spot]


def test_aws_candidates_keep_checkpoints_in_dlruns_bucket_of_their_region(monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", "alice")
    plan = planner.plan(spec(resources={"clouds": ["aws"], "spot": "always"}), CATALOG, profile=PROFILE)
    spot = cands(plan, "aws", True)
    assert spot and all(c.checkpoint == run_bucket_url("alice", c.offer.region) for c in spot)
    assert plan.chosen.spot and plan.chosen.checkpoint.startswith("s3://dlrun-")
    (note,) = [n for n in plan.notes if "checkpoints in" in n]
    assert plan.chosen.checkpoint in note and "30 days" in note
    assert plan.to_json()["chosen"]["checkpoint"] == plan.chosen.checkpoint


def test_spot_on_gcp_is_refused_with_the_reason_and_on_demand_keeps_the_node_disk():
    s = spec(resources={"clouds": ["gcp"]})
    plan = planner.plan(s, CATALOG, profile=PROFILE)
    spot, on_demand = cands(plan, "gcp", True), cands(plan, "gcp", False)
    assert spot and all(not c.eligible for c in spot)
    fits = [c for c in spot if runnable(s, c)]  # the others say first why they cannot run it at all
    assert fits and all("spot needs checkpoints in a bucket" in c.reason for c in fits)
    assert all(c.checkpoint == NODE_DISK for c in on_demand)
    assert plan.chosen is not None and not plan.chosen.spot
    # restarts on error relaunch the cluster: they need a bucket too
    s = spec(resources={"clouds": ["gcp"]}, max_restarts_on_errors=1)
    plan = planner.plan(s, CATALOG, profile=PROFILE)
    on_demand = [c for c in cands(plan, "gcp", False) if runnable(s, c)]
    assert plan.chosen is None and on_demand and all("max_restarts_on_errors" in c.reason for c in on_demand)


def test_the_jobs_bucket_is_used_where_its_cloud_can_reach_it():
    s = spec(checkpoint="s3://team/exp/", resources={"clouds": ["aws", "gcp"]})
    plan = planner.plan(s, CATALOG, profile=PROFILE)
    assert {c.checkpoint for c in plan.candidates if c.offer.cloud == "aws"} == {"s3://team/exp"}
    gcp = [c for c in plan.candidates if c.offer.cloud == "gcp"]
    assert gcp and all(not c.eligible for c in gcp)
    assert all("out of reach of gcp nodes" in c.reason for c in gcp if runnable(s, c))
    assert plan.chosen.offer.cloud == "aws"


def test_a_local_checkpoint_dir_with_a_cloud_is_refused_at_plan_time(tmp_path):
    with pytest.raises(SpecError, match=r"checkpoint: ~/ck is a directory on this machine.*s3://BUCKET/PREFIX"):
        planner.plan_job(spec(checkpoint="~/ck", resources={"clouds": ["local", "aws"]}), offers=CATALOG)
    path = job_file(tmp_path, checkpoint="~/ck", resources={"clouds": ["local", "gcp"]},
                    budget={"deadline": "1000h"}, **REF)  # a T4-hour is ~300 h of this CPU
    code, result = invoke(cli_plan.plan_command, [path])
    assert code == EXIT_BAD_INPUT and "nodes on gcp cannot reach" in str(result.exception)
    code, result = invoke(cli_plan.plan_command, [path, "--backend", "local", "--json"])  # fine on this machine
    assert code == 0 and json.loads(result.output)["chosen"]["checkpoint"] is None


def test_owner_identity_names_the_bucket(monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", "bob")
    assert run_bucket_url(owner_identity(), "us-east-1") != run_bucket_url("alice", "us-east-1")
    assert run_bucket_url("bob", "eu-west-1").startswith("s3://dlrun-") and "eu-west-1" in run_bucket_url("bob", "eu-west-1")
