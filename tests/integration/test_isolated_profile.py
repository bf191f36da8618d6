"""A user's model is profiled from its workdir, in a child process: found there without PYTHONPATH,
its import side effects stay in the child, the profile is cached with the workdir's content, and a
broken factory is one SpecError line."""
import os
import sys

import pytest

from orchestrator.errors import SpecError
from orchestrator.planning.isolated_profile import cached_in_workdir, measure_in_workdir
from orchestrator.planning.spec import Workload

MODEL = """
import os
import torch.nn as nn
os.environ["DLRUN_TEST_POISON"] = "1"  # a module with side effects: they must stay in the child


class TinyMLP(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)


def broken():
    raise RuntimeError("needs the data set")
"""


def workload(model="usermodel:TinyMLP"):
    return Workload(model=model, input_shape=[1, 8, 8], batch_size=16, dataset_size=256, epochs=2)


def test_the_workdirs_model_is_profiled_in_a_child_and_cached_with_the_code(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "usermodel.py").write_text(MODEL)
    assert "usermodel" not in sys.modules

    prof = measure_in_workdir(workload(), str(work))

    assert prof.params == 64 * 32 + 32 + 32 * 10 + 10 and prof.model_family == "mlp"
    assert prof.local_step_seconds["cpu"] > 0  # real steps, timed in the child
    assert "usermodel" not in sys.modules and "DLRUN_TEST_POISON" not in os.environ
    assert cached_in_workdir(workload(), str(work)) == prof
    (work / "usermodel.py").write_text(MODEL.replace("hidden=32", "hidden=48"))  # changed code
    assert cached_in_workdir(workload(), str(work)) is None

    with pytest.raises(SpecError) as e:
        measure_in_workdir(workload("usermodel:broken"), str(work))
    assert e.value.message.startswith("workload.model: usermodel:broken failed while profiling "
                                      "(RuntimeError: needs the data set)")
