"""bench/gpu_breakdown.py: a measured step's time per kernel class beside the prediction (here on the CPU's op
times; on a GPU the same accounting reads the kernels' device time)."""
import csv

import torch
import torch.nn as nn

from bench import gpu_breakdown
from infra.catalog import gpu_spec
from orchestrator.estimate import gpu_time, kernel_times, profile
from orchestrator.planning.spec import Workload


def _cpu_step():
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 10))
    opt = torch.optim.Adam(model.parameters(), foreach=True)
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    return step


def test_op_time_is_summed_by_the_estimators_kernel_class():
    _, by_op, device = gpu_breakdown.profile_step(_cpu_step(), steps=2)
    assert not device
    by_kind = kernel_times.time_by_kind(by_op, device, steps=2)
    assert {"conv", "norm", "gemm", "elementwise", "optimizer"} <= set(by_kind)
    assert all(v > 0 for v in by_kind.values())
    assert kernel_times.kind_of_event("aten::convolution_backward") == "conv"
    assert kernel_times.kind_of_event("aten::view") == "host"
    assert kernel_times.kind_of_event("Optimizer.step#Adam.step") is None  # a Python label, not a kernel


def test_a_models_rows_put_measured_and_predicted_per_class_side_by_side(tmp_path):
    p = profile.profile_now(Workload(model="tests.support.models:TinyCNN", input_shape=[1, 8, 8], batch_size=16,
                                     dataset_size=160, epochs=1), measure_local=False)
    predicted = gpu_time.gpu_step(p, gpu_spec("H200"))
    rows = gpu_breakdown.breakdown_rows("tiny", _cpu_step(), 0.002, predicted, steps=2)
    kinds = {r["name"]: r for r in rows if r["row"] == "kind"}
    assert kinds["conv"]["measured_ms"] > 0 and kinds["conv"]["predicted_ms"] > 0
    wall = next(r for r in rows if r["name"] == "step wall")
    assert (wall["measured_ms"], wall["predicted_ms"]) == (2.0, predicted.seconds * 1e3)
    ops = [r for r in rows if r["row"] == "op"]
    assert ops and all(r["name"].startswith("aten::") for r in ops)
    assert ops == sorted(ops, key=lambda r: -r["measured_ms"])
    out = tmp_path / "breakdown.csv"
    gpu_breakdown.write(out, rows)
    with open(out, newline="") as f:
        back = list(csv.DictReader(f))
    assert len(back) == len(rows) and set(back[0]) == set(gpu_breakdown.COLUMNS)
