"""Where each candidate's checkpoints go, decided by the planner; a local directory with a cloud is refused."""
from __future__ import annotations

import json

import pytest

from infra.aws.storage import run_bucket_url
from infra.gcp.storage import run_bucket_url as gcp_bucket_url
from infra.identity import owner_identity
from orchestrator.cli import plan as cli_plan
from orchestrator.errors import EXIT_BAD_INPUT, SpecError
from orchestrator.planning import planner, software
from orchestrator.planning.storage_plan import NODE_DISK
from tests.support.cli import invoke, job_file
from tests.support.planning import CATALOG, PROFILE, REF, spec


def runnable(s, c) -> bool:
    """The model fits and the job's torch can use the GPU (else that reason comes first)."""
    return c.estimate.fits and software.exclusion_reason(s, c.offer) is None


def cands(plan, cloud, spot):
    return [c for c in plan.candidates if c.offer.cloud == cloud and c.spot == spot]


def chosen_bucket(plan) -> str:
    """Where the chosen candidate keeps its checkpoints (the plan chose one, with a bucket)."""
    assert plan.chosen is not None and plan.chosen.checkpoint, plan.notes
    return plan.chosen.checkpoint


def test_aws_candidates_keep_checkpoints_in_dlruns_bucket_of_their_region(monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", "alice")
    plan = planner.plan(spec(resources={"clouds": ["aws"], "spot": "always"}), CATALOG, profile=PROFILE)
    spot = cands(plan, "aws", True)
    assert spot and all(c.checkpoint == run_bucket_url("alice", c.offer.region) for c in spot)
    assert plan.chosen and plan.chosen.spot and chosen_bucket(plan).startswith("s3://dlrun-")
    (note,) = [n for n in plan.notes if "checkpoints in" in n]
    assert chosen_bucket(plan) in note and "30 days" in note
    assert plan.to_json()["chosen"]["checkpoint"] == chosen_bucket(plan)


def test_gcp_candidates_keep_checkpoints_in_dlruns_gs_bucket_of_their_region(monkeypatch):
    monkeypatch.setenv("DLRUN_OWNER", "alice")
    s = spec(resources={"clouds": ["gcp"], "spot": "always"})
    plan = planner.plan(s, CATALOG, profile=PROFILE)
    spot = cands(plan, "gcp", True)
    assert spot and all(c.checkpoint == gcp_bucket_url("alice", c.offer.region) for c in spot)
    assert [c for c in spot if runnable(s, c) and c.eligible]  # spot on GCP is allowed again
    assert plan.chosen and plan.chosen.spot and chosen_bucket(plan).startswith("gs://dlrun-")
    (note,) = [n for n in plan.notes if "checkpoints in" in n]
    assert chosen_bucket(plan) in note and "30 days" in note
    # restarts on error relaunch the cluster: on-demand GCP candidates get the bucket too
    plan = planner.plan(spec(resources={"clouds": ["gcp"], "spot": "never"}, max_restarts_on_errors=1),
                        CATALOG, profile=PROFILE)
    assert plan.chosen is not None and plan.chosen.checkpoint == gcp_bucket_url("alice", plan.chosen.offer.region)
    on_demand = cands(plan, "gcp", False)
    assert on_demand and all(c.checkpoint != NODE_DISK for c in on_demand)
    # a single on-demand attempt keeps the node's disk there: no bucket, no service account per run
    plan = planner.plan(spec(resources={"clouds": ["gcp"], "spot": "never"}), CATALOG, profile=PROFILE)
    assert plan.chosen is not None and {c.checkpoint for c in cands(plan, "gcp", False)} == {NODE_DISK}
    assert any("own disk" in n for n in plan.notes)


@pytest.mark.parametrize("checkpoint, reaching, other, other_gets", [
    ("s3://team/exp/", "aws", "gcp", "gs://"),  # an s3:// checkpoint: AWS nodes reach it, GCP nodes do not
    ("gs://team/exp/", "gcp", "aws", "s3://"),  # a gs:// checkpoint: GCP nodes reach it, AWS nodes do not
])
def test_the_jobs_bucket_is_used_where_its_cloud_can_reach_it(checkpoint, reaching, other, other_gets):
    s = spec(checkpoint=checkpoint, resources={"clouds": ["aws", "gcp"]})
    plan = planner.plan(s, CATALOG, profile=PROFILE)
    assert {c.checkpoint for c in plan.candidates if c.offer.cloud == reaching} == {checkpoint.rstrip("/")}
    unreached = [c for c in plan.candidates if c.offer.cloud == other]
    assert unreached and all(not c.eligible for c in unreached)
    runnable_unreached = [c for c in unreached if runnable(s, c)]
    assert runnable_unreached and all(
        f"out of reach of {other} nodes (they get {other_gets} credentials only)" in (c.reason or "")
        for c in runnable_unreached)
    assert plan.chosen and plan.chosen.offer.cloud == reaching
    assert chosen_bucket(plan) in [n for n in plan.notes if "checkpoints in" in n][0]


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
    bucket = run_bucket_url("bob", "eu-west-1")
    assert bucket.startswith("s3://dlrun-") and "eu-west-1" in bucket
    # one name per owner and region, on either cloud
    assert gcp_bucket_url("bob", "us-central1") == f"gs://{run_bucket_url('bob', 'us-central1')[5:]}"
