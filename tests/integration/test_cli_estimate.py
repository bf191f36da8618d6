"""`dlrun estimate` through click's CliRunner: GPUs of the table whether or not offered, the JSON, the mistakes."""
import json

import pytest

from orchestrator.cli import estimate as cli_estimate
from tests.support.cli import invoke, job_file

LSTM = {"model": "tests.support.models:TinyLSTM", "input_shape": [16], "input_dtype": "long", "batch_size": 8,
        "dataset_size": 80, "epochs": 2}
KEYS = {"gpu", "count", "step_seconds", "samples_per_second", "run_seconds", "basis", "low", "high", "detail",
        "start_seconds"}


@pytest.fixture(autouse=True)
def cpu_only_machine(monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")


def test_any_gpu_of_the_table_with_its_basis_and_range_as_json(tmp_path):
    path = job_file(tmp_path, workload=LSTM, resources={"clouds": ["aws"]})
    code, result = invoke(cli_estimate.estimate_command, [path, "--gpu", "RTX4090", "--gpu", "h100:8", "--json"])
    assert code == 0, result.output
    rows = json.loads(result.stdout[result.stdout.index("["):])
    assert [(r["gpu"], r["count"]) for r in rows] == [("RTX4090", 1), ("H100", 8)]  # no AWS offer has a 4090
    for r in rows:
        assert set(r) == KEYS and r["basis"] == "roofline"
        assert r["low"] < r["step_seconds"] < r["high"]
        assert r["samples_per_second"] == pytest.approx(8 / r["step_seconds"])
        assert r["run_seconds"] > r["step_seconds"] * 20  # two epochs of ten steps, plus the process's start


def test_the_screen_says_the_start_inside_the_run_how_n_gpus_share_the_batch_and_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    path = job_file(tmp_path, workload=LSTM, resources={"clouds": ["aws"]})
    code, result = invoke(cli_estimate.estimate_command, [path, "--gpu", "H200", "--gpu", "H100:8"])
    assert code == 0, result.output
    out = result.output
    assert " start)" in out  # the run column: "7 s (5 s start)"
    assert "N×GPU: workload.batch_size is the whole step's batch, split across the N GPUs" in " ".join(out.split())
    assert "host CPU: the H200 calibration host" in " ".join(out.split())
    notes = out[out.index("└"):].splitlines()[1:]
    assert notes and all(len(line) <= 80 for line in notes)


def test_by_default_the_gpus_the_jobs_offers_have(tmp_path):
    path = job_file(tmp_path, workload=LSTM, resources={"clouds": ["gcp"], "accelerators": "T4:1"})
    code, result = invoke(cli_estimate.estimate_command, [path])
    assert code == 0, result.output
    assert "T4" in result.output and "roofline" in result.output and "H100" not in result.output


def test_the_overrides_choose_the_offers_whose_gpus_are_shown_and_a_refused_one_is_one_line(tmp_path):
    """--gpus/--cloud as on plan and submit (orchestrator/planning/overrides.py): the job file asks for a T4 on GCP,
    the flags for an L4 on AWS; a value the job file's rules refuse names the flag, exit 2, before profiling."""
    path = job_file(tmp_path, workload=LSTM, resources={"clouds": ["gcp"], "accelerators": "T4:1"})
    code, result = invoke(cli_estimate.estimate_command, [path, "--gpus", "L4:1", "--cloud", "aws", "--json"])
    assert code == 0, result.output
    assert {e["gpu"] for e in json.loads(result.stdout)} == {"L4"}
    code, result = invoke(cli_estimate.estimate_command, [path, "--gpus", "T5:1"])
    assert code == 2 and str(result.exception).startswith("--gpus: unknown accelerator 'T5'"), result.output
    assert "profiling" not in result.output


@pytest.mark.parametrize("gpu, says", [("H1OO", "unknown GPU 'H1OO'; did you mean H100?"),
                                       ("T4:0", "COUNT must be a whole number of GPUs")])
def test_a_mistyped_gpu_is_one_line_and_exit_2_before_profiling(tmp_path, gpu, says):
    path = job_file(tmp_path, workload={**LSTM, "model": "tests.support.models:NoSuchModel"})
    code, result = invoke(cli_estimate.estimate_command, [path, "--gpu", gpu])
    assert code == 2 and says in str(result.exception)
