"""--gpus, --cloud, --region, --spot/--on-demand and --env on `plan` and `submit` (orchestrator/planning/overrides.py):
the job file's resources and env for this run, checked by the file's own rules; a refused value is one line
naming the flag, exit 2, before profiling."""
import json

import pytest

from orchestrator.cli import plan as cli_plan
from orchestrator.cli.main import cli
from orchestrator.planning.overrides import Overrides, with_overrides
from orchestrator.planning.spec import load_job
from tests.support.cli import invoke, job_file

TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


@pytest.fixture(autouse=True)
def cpu_only_machine_without_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.aws, no gcloud login
    for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS", "DLRUN_GCP_EMULATOR"):
        monkeypatch.delenv(var, raising=False)


def test_the_flags_choose_the_gpu_cloud_region_and_market(tmp_path):
    path = job_file(tmp_path, workload=TINY)
    args = [path, "--gpus", "T4:1", "--cloud", "gcp", "--region", "us-central1", "--spot", "--any-cloud", "--json"]
    code, result = invoke(cli_plan.plan_command, args)
    assert code == 0, result.output
    plan = json.loads(result.stdout)
    chosen = plan["chosen"]
    assert (chosen["cloud"], chosen["region"], chosen["accelerator"], chosen["spot"]) == ("gcp", "us-central1", "T4",
                                                                                          True)
    assert {c["cloud"] for c in plan["candidates"]} == {"gcp"}
    code, result = invoke(cli_plan.plan_command, [path, "--cloud", "aws", "--on-demand", "--any-cloud", "--json"])
    assert code == 0 and not any(c["spot"] for c in json.loads(result.stdout)["candidates"])


@pytest.mark.parametrize("flag,value,said", [
    ("--gpus", "T5:1", "--gpus: unknown accelerator 'T5'"),
    ("--gpus", "T4:x", "--gpus: count in 'T4:x' must be a whole number"),
    ("--cloud", "azure", "--cloud: Input should be 'local', 'aws', 'gcp', 'cluster' or 'cluster:NAME'"),
    ("--env", "1X=2", "--env: '1X=2' is not NAME=VALUE"),
])
def test_a_refused_value_names_the_flag_before_profiling(tmp_path, flag, value, said):
    for command, args in ((cli_plan.plan_command, []), (cli, ["submit"])):
        code, result = invoke(command, [*args, job_file(tmp_path, workload=TINY), flag, value])
        assert code == 2 and str(result.exception).startswith(said), result.output
        assert "profiling" not in result.output


def test_env_is_added_to_the_files_and_gpus_meets_the_credentials_check(tmp_path):
    path = job_file(tmp_path, workload=TINY, env={"SEED": "0", "KEEP": "1"})
    spec = with_overrides(load_job(path), Overrides(env=("SEED=7", "EXTRA=a=b")))
    assert spec.env == {"SEED": "7", "KEEP": "1", "EXTRA": "a=b"}
    code, result = invoke(cli, ["submit", job_file(tmp_path, workload=TINY), "--gpus", "T4:1"])
    assert code == 4 and "could run this job, and" in str(result.exception)  # no cloud credentials here


def test_the_runner_up_named_under_the_table_is_a_row_of_it(tmp_path):
    """A CPU job: this machine first, a cloud CPU second (the same GPU configuration, 'CPU')."""
    code, result = invoke(cli_plan.plan_command, [job_file(tmp_path, workload=TINY), "--any-cloud"])
    assert code == 0, result.output
    lines = result.output.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("chosen: "))
    chosen = " ".join(lines[at:])  # the line as said, however the screen wrapped it
    runner_up = chosen.split("(runner-up: ")[1].split(",")[0]  # e.g. "aws us-east-2 c7i.large CPU spot"
    cloud, region, instance = runner_up.split()[:3]
    assert any(f"{cloud} {region}" in line and instance in line for line in lines[:at]), result.output
