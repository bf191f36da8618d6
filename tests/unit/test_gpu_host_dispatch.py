"""The host's dispatch per op class: measured by bench/calibrate_gpu.py's module chains, priced by host_time."""
import csv
import shutil

import pytest

from bench import calibrate_gpu
from infra.catalog import CATALOG_DIR, gpu_spec
from orchestrator.estimate import gpu_calibration, gpu_time, host_time, profile
from orchestrator.planning.spec import Workload
from orchestrator.estimate.step_ops import OpCost


def test_each_class_cost_is_solved_from_chains_that_mix_classes():
    cost = {"elementwise": 8e-6, "gemm": 20e-6, "norm": 30e-6, "conv": 60e-6}
    chains = [{"elementwise": 20, "norm": 1}, {"gemm": 20, "norm": 1}, {"conv": 20, "elementwise": 20, "norm": 1},
              {"elementwise": 20, "norm": 21}, {"norm": 21}]
    rows = [(c, sum(n * cost[k] for k, n in c.items())) for c in chains]
    assert calibrate_gpu._per_kind(rows) == pytest.approx(cost)


def test_each_chain_dispatches_its_class_once_per_module_and_together_they_solve_every_class():
    """What the least squares stands on, counted (no clock): each chain's modules dispatch one op of its class each
    forward (plus the loss's one reduction), the backward at least one more per module; the chains' counts have full rank."""
    import torch

    expected_fwd = {"relu": {"elementwise": 20, "norm": 1}, "linear": {"gemm": 20, "norm": 1},
                    "conv2d": {"conv": 20, "norm": 1}, "batchnorm2d": {"elementwise": 20, "norm": 21},
                    "layernorm": {"norm": 21}}
    counts = []
    for op in calibrate_gpu.HOST_CHAINS:
        model, x = calibrate_gpu._chain(op, "cpu")
        fwd = calibrate_gpu._ops_by_kind(lambda model=model, x=x: model(x).float().sum())
        step = calibrate_gpu._ops_by_kind(lambda model=model, x=x: model(x).float().sum().backward())
        assert fwd == expected_fwd[op], op
        assert all(step[k] >= n for k, n in fwd.items()) and sum(step.values()) >= sum(fwd.values()) + 20, (op, step)
        counts.append(fwd)
    kinds = sorted({k for c in counts for k in c})
    assert kinds == ["conv", "elementwise", "gemm", "norm"]
    a = torch.tensor([[float(c.get(k, 0)) for k in kinds] for c in counts])
    assert torch.linalg.matrix_rank(a) == len(kinds)


def test_the_chains_are_timed_on_this_machine_into_host_rows_per_dtype_and_pass():
    """The same chains as on a GPU, here on the CPU (a few repetitions), timed forward and backward, plain and
    under autocast. Which classes come out positive depends on this machine's load (a class whose least-squares
    cost is not positive is left out, _per_kind): with positive chain times at least one always does."""
    rows = list(calibrate_gpu.host_rows(quick=True, device="cpu", reps=2))
    assert rows and all(r["section"] == "host" and r["ms"] > 0 for r in rows)
    assert {r["op"] for r in rows} <= {"conv", "elementwise", "gemm", "norm"}
    assert {(r["dtype"], r["pass_"]) for r in rows} == {(d, p) for d in ("fp32", "bf16") for p in ("fwd", "bwd")}


def _catalog_with(tmp_path, host_rows):
    """The shipped catalog with its host rows replaced by `host_rows` (kind, dtype, pass, ms per op)."""
    cat = tmp_path / "catalog"
    shutil.copytree(CATALOG_DIR, cat)
    columns = None
    for path in cat.glob("gpu_kernels*.csv"):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns, kept = reader.fieldnames, [r for r in reader if r["section"] != "host"]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, columns, lineterminator="\n")
            w.writeheader()
            w.writerows(kept)
    assert columns is not None
    with open(cat / "gpu_kernels_host_test.csv", "w", newline="") as f:
        w = csv.DictWriter(f, columns, lineterminator="\n")
        w.writeheader()
        for kind, dtype, pass_, ms in host_rows:
            w.writerow({c: "" for c in columns} | dict(gpu="H200", section="host", op=kind, dtype=dtype, pass_=pass_,
                                                        ms=ms, source="test host", date="2026-11-27"))
    return cat


def _cnn_step(precision="fp32"):
    p = profile.profile_now(Workload(model="tests.support.models:TinyCNN", input_shape=[1, 8, 8], batch_size=8,
                                     dataset_size=80, epochs=1, precision=precision), measure_local=False)
    return p, gpu_time.gpu_step(p, gpu_spec("H200"))


def test_measured_host_costs_price_their_class_and_the_prior_the_rest(tmp_path, monkeypatch):
    p, _ = _cnn_step()
    conv_fwd_calls = sum(o.count for o in p.ops if o.kind == "conv" and o.phase == "forward")
    assert conv_fwd_calls
    steps = {}
    for conv_ms in (0.05, 0.5):
        monkeypatch.setenv("DLRUN_CATALOG_DIR", str(_catalog_with(tmp_path / str(conv_ms), [
            ("conv", "fp32", "fwd", conv_ms), ("elementwise", "fp32", "fwd", 0.01)])))
        steps[conv_ms] = gpu_time.gpu_step(p, gpu_spec("H200"))
    assert steps[0.5].host_seconds - steps[0.05].host_seconds == pytest.approx(
        conv_fwd_calls * 0.45e-3 * host_time.REAL_STEP_FACTOR)
    assert steps[0.5].seconds > steps[0.05].seconds  # a slow conv dispatch makes this host-bound step longer
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    unit = gpu_calibration.host_unit_seconds(cal)
    view = OpCost(name="(views and allocations)", count=3, flops=0, bytes=0, kind="host")
    adam = OpCost(name="_foreach_add_", count=2, flops=0, bytes=0, kind="optimizer", phase="optimizer")
    assert host_time.op_host_seconds(view, cal, autocast=False) == 0.0  # inside the measured costs
    assert host_time.op_host_seconds(adam, cal, autocast=False) == pytest.approx(
        2 * unit * gpu_calibration.HOST_WEIGHTS["optimizer"] * host_time.REAL_STEP_FACTOR)


def test_autocast_steps_use_the_costs_measured_under_autocast(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_CATALOG_DIR", str(_catalog_with(tmp_path, [("conv", "fp32", "fwd", 0.5)])))
    p, _ = _cnn_step("bf16")
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    conv = next(o for o in p.ops if o.kind == "conv" and o.phase == "forward")
    unit = gpu_calibration.host_unit_seconds(cal)
    factor = host_time.REAL_STEP_FACTOR
    assert host_time.op_host_seconds(conv, cal, autocast=True) == pytest.approx(conv.count * unit * factor)  # prior
    assert host_time.op_host_seconds(conv, cal, autocast=False) == pytest.approx(conv.count * 0.5e-3 * factor)


def test_without_host_rows_every_op_is_priced_by_the_prior(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_CATALOG_DIR", str(_catalog_with(tmp_path, [])))
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    assert cal.host_op_seconds == {}
    view = OpCost(name="(views and allocations)", count=4, flops=0, bytes=0, kind="host")
    assert host_time.op_host_seconds(view, cal, autocast=False) == pytest.approx(
        4 * gpu_calibration.host_unit_seconds(cal) * gpu_calibration.HOST_WEIGHTS["host"] * host_time.REAL_STEP_FACTOR)


def test_the_shipped_h200_host_rows_come_from_the_device_run():
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    assert {k for k in cal.host_op_seconds} >= {("conv", "bf16", "fwd"), ("norm", "fp32", "bwd")}
    assert all(1e-6 < v < 1e-3 for v in cal.host_op_seconds.values())
