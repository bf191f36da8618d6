"""Plans over the backends usable from here (orchestrator/planning/usable.py), in a fresh HOME with no cloud
credentials. In-process: the unit tier's guard (tests/support/in_process.py) fails any socket or process, so
a test that passes here made no network call, no firewall step, no registry or quota read."""
import json

import pytest

from orchestrator.cli import plan as cli_plan
from orchestrator.cli.main import cli
from orchestrator.runs.run_loop import unusable_at_submit
from orchestrator.state.db import Store
from tests.support.cli import invoke, job_file
from tests.support.credentials import without_cloud_credentials

TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


@pytest.fixture(autouse=True)
def no_credentials(monkeypatch, tmp_path):
    without_cloud_credentials(monkeypatch, tmp_path)


def test_a_t4_job_without_credentials_is_refused_before_profiling_with_exit_4(tmp_path):
    path = job_file(tmp_path, resources={"accelerators": "T4:1"}, workload=TINY)
    for command, args in ((cli_plan.plan_command, [path]), (cli, ["submit", path])):
        code, result = invoke(command, args)
        assert code == 4, result.output
        line = str(result.exception)
        assert line.startswith("t: aws or gcp could run this job, and they have no credentials here — aws: no "
                               "AWS credentials found")
        assert "run `aws configure`" in line and "run `gcloud auth application-default login`" in line
        assert "profiling" not in result.output  # refused before the model was measured
    assert Store().list_jobs() == []  # nothing recorded, nothing started


def test_backend_names_a_cloud_without_credentials(tmp_path):
    code, result = invoke(cli_plan.plan_command, [job_file(tmp_path, workload=TINY), "--backend", "gcp"])
    assert code == 4 and str(result.exception).startswith("t: only gcp could run this job, and it has no")


def test_an_unknown_backend_is_refused_before_profiling(tmp_path):
    code, result = invoke(cli_plan.plan_command, [job_file(tmp_path, workload=TINY), "--backend", "cluster:foo"])
    assert code == 2 and "--backend: 'cluster:foo' is not one of" in str(result.exception)
    assert "profiling" not in result.output


def test_clouds_without_credentials_are_shown_excluded_and_never_chosen(tmp_path):
    code, result = invoke(cli_plan.plan_command, [job_file(tmp_path, workload=TINY), "--json"])
    assert code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["chosen"]["cloud"] == "local"
    assert set(plan["unusable"]) == {"aws", "gcp"} and "aws configure" in plan["unusable"]["aws"]
    cpu = [c for c in plan["candidates"] if c["cloud"] == "aws" and c["accelerator"] is None]
    assert cpu and all(c["reason"] == "no aws credentials (`dlrun check`)" and not c["eligible"] for c in cpu)
    assert any(n.startswith("left out, no credentials here: aws, gcp") for n in plan["notes"])


def test_a_job_only_a_cloud_would_meet_says_credentials_after_planning(tmp_path):
    """This machine passes the job's rules but misses its deadline: the plan, not the early check, says it."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = job_file(tmp_path, job=None, run="python train.py", reference={"accelerator": "T4", "hours": 1},
                    budget={"deadline": "3h"})
    code, result = invoke(cli_plan.plan_command, [path, "--all"])
    assert code == 4, result.output
    assert "could run this job, and" in str(result.exception)
    screen = result.stdout
    assert "no aws credentials (`dlrun check`)" in screen and "local" in screen


def test_a_run_loop_leaves_out_the_clouds_its_submitted_plan_left_out():
    store = Store()
    job_id = store.create_job(name="t", spec_hash="h", spec_json="{}")
    store.add_event(job_id, "plan", {"chosen": "local", "unusable": ["aws", "gcp"]})
    assert unusable_at_submit(None, store, job_id) == {"aws", "gcp"}  # a detached supervisor's re-plans


def test_a_mistake_in_config_yaml_is_said_before_the_missing_credentials(tmp_path, dlrun_home):
    (dlrun_home / "config.yaml").write_text("clusters: {lab: {address: ray-head:8265}}\n")
    code, result = invoke(cli_plan.plan_command, [job_file(tmp_path, workload=TINY, resources={"clouds": ["aws"]})])
    assert code == 2 and "clusters.lab.address: expected the dashboard URL" in str(result.exception)


def test_amounts_that_differ_read_different():
    from orchestrator.cost import usd, usd_apart

    assert usd_apart(0.0203, 0.02) == ("$0.0203", "$0.0200")  # never "est. $0.02 > budget $0.02"
    assert usd_apart(0.0001, 0.0025) == ("$0.0001", "$0.0025")  # never "costs up to $0.00"
    assert [usd(v) for v in (0.0012, 0.5, 36000)] == ["$0.0012", "$0.50", "$36,000"]
