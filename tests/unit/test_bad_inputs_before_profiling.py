"""A user's mistake in a flag or in the job's workload is one line on stderr (`dlrun: error: ...`, the field and
its file:line where there is one), exit 2, before anything is profiled: never Click's usage block, never an
internal error. Through orchestrator.cli.main.main, as the `dlrun` command runs."""
import pytest

from orchestrator.cli.main import main
from tests.support.cli import job_file

TINY = {"model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32,
        "dataset_size": 320, "epochs": 2}


@pytest.fixture(autouse=True)
def cpu_only_machine(monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")


def run(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    captured = capsys.readouterr()
    return ended.value.code, captured.err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("dlrun: error: "), err
    assert "Traceback" not in err and "Usage:" not in err and "profiling" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_max_cost_that_is_not_money(tmp_path, capsys, command):
    code, err = run(capsys, command, job_file(tmp_path, workload=TINY), "--max-cost", "abc")
    assert code == 2
    assert one_line(err) == (f"dlrun: error: --max-cost: 'abc' is not an amount of US dollars (e.g. 5 or 0.50) "
                             f"(see `dlrun {command} --help`)")


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_an_unknown_cluster_is_refused_alike_by_plan_and_submit(tmp_path, capsys, command):
    code, err = run(capsys, command, job_file(tmp_path, workload=TINY), "--backend", "cluster:foo")
    assert code == 2
    assert one_line(err).startswith("dlrun: error: --backend: 'cluster:foo' is not one of local, aws, gcp, cluster")


def test_an_unknown_option_or_a_missing_argument(capsys):
    code, err = run(capsys, "plan", "--bogus")
    line = one_line(err)  # Click may add its "Did you mean ...?"
    assert code == 2 and line.startswith("dlrun: error: No such option '--bogus'")
    assert line.endswith("(see `dlrun plan --help`)")
    code, err = run(capsys, "plan")
    assert code == 2 and one_line(err) == "dlrun: error: Missing argument 'JOB_FILE' (see `dlrun plan --help`)"


@pytest.mark.parametrize("command", ["plan", "submit"])
def test_an_input_shape_the_model_cannot_take(tmp_path, capsys, dlrun_home, command):
    path = job_file(tmp_path, workload={**TINY, "input_shape": [1, 8]})
    code, err = run(capsys, command, path, "--backend", "local")
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"dlrun: error: {path}:")  # the line of workload.input_shape
    assert ("workload.input_shape: tests.support.models:TinyCNN does not take a sample of shape [1, 8] "
            "(RuntimeError: ") in line
    assert "give the shape of one sample, without the batch dimension" in line
    assert not (dlrun_home / "crashes").exists()


def test_a_misspelt_model_names_its_line(tmp_path, capsys):
    path = job_file(tmp_path, workload={**TINY, "model": "tests.support.models:TinyCNNN"})
    code, err = run(capsys, "plan", path)
    line = one_line(err)
    assert code == 2 and line.startswith(f"dlrun: error: {path}:")
    assert "workload.model: cannot import 'tests.support.models:TinyCNNN'" in line


def test_a_model_meta_tensors_cannot_run_is_not_refused(tmp_path, capsys):
    """A model whose forward calls .item() fails on the meta device only: the CPU try lets it through."""
    path = job_file(tmp_path, workload={**TINY, "model": f"{__name__}:ItemCNN"})
    from orchestrator.planning.spec import load_job
    from orchestrator.planning.workload_check import check_workload

    check_workload(load_job(path), path)


def ItemCNN():
    """TinyCNN whose forward reads a number out of a tensor (which a meta tensor cannot give)."""
    import torch.nn as nn

    from tests.support.models import TinyCNN

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = TinyCNN()

        def forward(self, x):
            return self.body(x) * (1.0 if float(x.abs().sum().item()) >= 0 else 0.0)

    return Model()


def test_submit_takes_a_configured_cluster_as_plan_does(tmp_path, capsys, dlrun_home):
    """cluster:lab of config.yaml passes --backend in submit too (the job's own mistake is then what is said)."""
    (dlrun_home / "config.yaml").write_text("clusters:\n  lab:\n    address: http://ray-head:8265\n")
    path = job_file(tmp_path, workload={**TINY, "input_shape": [1, 8]})
    for command in ("plan", "submit"):
        code, err = run(capsys, command, path, "--backend", "cluster:lab")
        assert code == 2 and "workload.input_shape" in one_line(err)
