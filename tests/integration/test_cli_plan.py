"""`dlrun plan` and `dlrun catalog [refresh]` through click's CliRunner (refresh under moto)."""
import json

import pytest

from orchestrator.cli import plan as cli_plan
from tests.support.cli import invoke, job_file

TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}
BIG = {"model": "tests.support.models:BigMLP", "input_shape": [64], "batch_size": 32, "dataset_size": 3200,
       "epochs": 1}


@pytest.fixture(autouse=True)
def cpu_only_machine(monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")


def test_budget_below_the_cheapest_exits_3_with_the_table(tmp_path):
    path = job_file(tmp_path, workload=TINY, resources={"clouds": ["aws", "gcp"]})
    code, result = invoke(cli_plan.plan_command, [path, "--max-cost", "0.001", "--any-cloud"])  # no credentials here
    assert code == 3
    assert "why not" in result.output and "g4dn.xlarge" in result.output
    assert "> budget" in result.output and "$0.001" in result.output
    assert "cheapest candidate that would work costs up to $" in str(result.exception)


def test_a_model_too_big_for_a_k80_is_shown_not_fitting_and_the_k80_retired(tmp_path):
    path = job_file(tmp_path, workload=BIG)
    code, result = invoke(cli_plan.plan_command, [path, "--all"])
    assert code == 0, result.output
    k80_rows = [line for line in result.output.splitlines() if "K80" in line]
    # the reason shown is the first one: the family is retired; the memory check still runs (--json)
    assert k80_rows and all("retired on" in line and "never launched" in line for line in k80_rows)
    assert "chosen:" in result.output
    code, result = invoke(cli_plan.plan_command, [path, "--json"])
    k80 = [c for c in json.loads(result.stdout)["candidates"] if c["accelerator"] == "K80"]
    assert k80 and all(not c["estimate"]["fits"] and not c["feasible"] for c in k80)


def test_plan_json_and_plot(tmp_path):
    path = job_file(tmp_path, workload=TINY)
    png = tmp_path / "plan.png"
    code, result = invoke(cli_plan.plan_command, [path, "--json", "--plot", str(png)])
    assert code == 0, result.output
    data = json.loads(result.stdout)
    assert data["chosen"]["cloud"] == "local"  # free, and a few seconds of CPU
    assert data["profile"]["local_step_seconds"]["cpu"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000


def test_backend_flag_and_deadline(tmp_path):
    path = job_file(tmp_path, workload=TINY)
    code, result = invoke(cli_plan.plan_command, [path, "--backend", "gcp", "--json", "--any-cloud"])
    assert code == 0
    assert {c["cloud"] for c in json.loads(result.stdout)["candidates"]} == {"gcp"}
    code, result = invoke(cli_plan.plan_command, [path, "--backend", "aws", "--deadline", "1s", "--any-cloud"])
    assert code == 3 and "deadline" in str(result.exception)


def test_a_bad_job_file_is_a_spec_error(tmp_path):
    path = job_file(tmp_path, resources={"accelerators": "T5:1"})
    code, result = invoke(cli_plan.plan_command, [path])
    assert code == 2 and "T4" in str(result.exception)


def test_catalog_lists_and_filters_offers():
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "t4", "--cloud", "gcp"])
    assert code == 0
    rows = [line for line in result.output.splitlines() if "n1-standard" in line]
    assert rows and all("T4" in r for r in rows)
    assert "aws" not in result.output.split("catalog:")[1]
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "X9"])
    assert code == 2


