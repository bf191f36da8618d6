"""The host side of a GPU step (orchestrator/estimate/host_time.py) and what the recorder marks for the GPU model:
cuDNN RNN launches, per-parameter costs, the overlap rule, the offer's host CPU, unaligned GEMMs, BatchNorm widths,
and the breakdown's classes for what a profiled CUDA step shows."""
import dataclasses
from pathlib import Path

import pytest
import torch

from bench import step_kernels
from infra.catalog import Offer, gpu_spec
from orchestrator.estimate import estimator, gpu_calibration, host_time, kernel_times, profile
from orchestrator.estimate.kernels import gemm_alignment
from orchestrator.estimate.step_ops import OpCost
from orchestrator.estimate.workload import Workload

RUN = Path(__file__).resolve().parents[1] / "support" / "data" / "h200_device_run_2026-11-28"


def _profile(model="tests.support.models:TinyCNN", **kw):
    fields = dict(model=model, input_shape=[1, 8, 8], batch_size=8, dataset_size=80, epochs=1) | kw
    return profile.profile_now(Workload(**fields), measure_local=False)


def test_what_a_profiled_cuda_step_shows_is_counted_in_its_class():
    """Op names from the H200 run's breakdown.csv that the classifier used to put under 'elementwise'."""
    for op, kind in [("aten::_cudnn_rnn", "rnn"), ("aten::_cudnn_rnn_backward", "rnn"),
                     ("aten::_cudnn_attention_forward", "attention"), ("aten::_cudnn_attention_backward", "attention"),
                     ("aten::_efficient_attention_backward", "attention"), ("aten::_conv_depthwise2d", "conv"),
                     ("aten::mul", "elementwise")]:
        assert kernel_times.kind_of_event(op) == kind, op


def test_cudnn_rnn_launches_are_priced_from_the_launch_bound_lstm_rows():
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    # b16 s256 h256 L2: 19.14 ms fp32, 19.39 bf16 over 3 × 256 × 2 recorded launches (the 2026-11-28 rows)
    assert cal.rnn_launch_seconds == pytest.approx(19.143e-3 / 1536, rel=0.02)
    op = OpCost(name="cudnn_rnn (LSTM)", count=2, flops=1e9, bytes=1e6, kind="rnn", launches=256, phase="forward")
    assert host_time.op_host_seconds(op, cal, autocast=False) == pytest.approx(
        256 * cal.rnn_launch_seconds * host_time.RNN_STEP_FACTOR)
    lstm = _profile("bench.gpu_models:LSTMClassifier", input_shape=[128], input_dtype="long", batch_size=64)
    step = estimator.gpu_step(lstm, gpu_spec("H200"))
    assert step.host_seconds > 0.5 * step.gpu_seconds  # the H200 ran this loop 30 % idle, waiting for launches


def test_each_parameter_tensor_costs_the_host_its_optimizer_and_autograd_time():
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    p = _profile()
    more = dataclasses.replace(p, param_tensors=p.param_tensors + 100)
    before = sum(host_time.host_seconds(p, cal))
    after = sum(host_time.host_seconds(more, cal))
    assert after - before == pytest.approx(100 * host_time.PER_PARAM_SECONDS * host_time.REAL_STEP_FACTOR)
    from tests.support.models import TinyCNN

    assert p.param_tensors == len(list(TinyCNN().parameters()))


def test_host_and_gpu_overlap_as_a_smooth_maximum():
    assert host_time.overlapped(0.010, 0.0) == 0.010
    assert host_time.overlapped(0.0, 0.020) == 0.020
    assert host_time.overlapped(0.010, 0.020) == pytest.approx(host_time.overlapped(0.020, 0.010))
    equal = host_time.overlapped(0.010, 0.010)
    assert equal == pytest.approx(0.010 * 2 ** (1 / host_time.OVERLAP_P))  # neither hides the other entirely
    assert 0.020 < host_time.overlapped(0.005, 0.020) < 0.0201  # far apart: the slower one


def _offer(instance_type, acc="H100"):
    return Offer(cloud="aws", region="r", instance_type=instance_type, accelerator=acc, accelerator_count=1,
                 gpu_memory_gb=80, vcpus=8, memory_gb=64, price_per_hour=1.0, spot_price_per_hour=None)


def test_a_host_bound_step_on_a_slower_host_cpu_takes_longer_and_says_which_host():
    p = _profile()  # host-bound on any GPU
    slow = host_time.host_of("p3.2xlarge")
    fast = host_time.host_of("p5.48xlarge")
    assert slow.speed < 1.0 and slow.source
    assert host_time.host_of("unknown-type") is host_time.REFERENCE_HOST
    on_slow = estimator.gpu_step(p, gpu_spec("V100"), host=slow)
    on_reference = estimator.gpu_step(p, gpu_spec("V100"))
    assert on_slow.host_seconds == pytest.approx(on_reference.host_seconds / slow.speed)
    assert on_slow.seconds > on_reference.seconds
    assert slow.name in on_slow.basis and "host-bound" in on_slow.basis
    e = estimator.estimate(p, _offer("p5.48xlarge"), spot=False)
    assert fast.name in e.detail


def test_gemms_with_sides_tensor_cores_cannot_tile_are_marked_for_their_own_fit():
    bf = torch.bfloat16
    assert gemm_alignment([torch.empty(64, 768, dtype=bf), torch.empty(768, 1024, dtype=bf)]) == ""
    assert gemm_alignment([torch.empty(64, 768, dtype=bf), torch.empty(768, 30522, dtype=bf)]) == "unaligned"
    assert gemm_alignment([torch.empty(64, 768, dtype=bf), torch.empty(768, 50257, dtype=bf)]) == "unaligned/odd"
    assert gemm_alignment([torch.empty(64, 766), torch.empty(766, 1024)]) == "unaligned"  # fp32: rows of 4
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    aligned, odd = cal.fits[("gemm", "bf16", "", "")], cal.fits[("gemm", "bf16", "unaligned/odd", "")]
    assert odd.efficiency < aligned.efficiency / 3  # GPT-2's vocabulary GEMMs: 0.12-0.19 of the peak
    a100, _ = gpu_calibration.calibration_for(gpu_spec("A100"))
    assert ("gemm", "bf16", "unaligned/odd", "") in a100.fits  # pooled from the GPU that measured it


def test_step_kernels_take_rows_from_seen_loops_only():
    rows = step_kernels.rows(RUN, "H200", "2026-11-28")
    assert rows and {r["layout"] for r in rows} <= {"unaligned", "unaligned/odd", "nchw/dw", "nhwc/dw"}
    from bench.estimator_gpu import SUITE

    held_out = {name for name, seen, _ in SUITE if not seen}
    assert not any(name in r["source"] for r in rows for name in held_out)
    shipped = [r for r in gpu_calibration.rows() if "bench/step_kernels.py" in r.get("source", "")]
    assert {(r["shape"], r["ms"]) for r in shipped} == {(r["shape"], r["ms"]) for r in rows}


def test_pooling_ops_are_marked_for_their_own_fit_and_priced_as_elementwise_until_measured():
    p = _profile("tests.support.models:TinyCNN")
    pools = [o for o in p.ops if o.name.startswith("max_pool2d")]
    assert pools and all(o.layout == "pool" and o.kind == "elementwise" for o in pools)
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    from orchestrator.estimate import gpu_time

    plain = dataclasses.replace(pools[0], layout="")
    assert gpu_time.kernel_seconds(pools[0], gpu_spec("H200"), cal, False) == gpu_time.kernel_seconds(
        plain, gpu_spec("H200"), cal, False)  # no 'pool' rows shipped yet: the elementwise fit


def test_a_batchnorm_with_few_channels_runs_slower_per_byte():
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    fit = cal.fits[("norm", "fp32", "batch", "bwd")]
    assert fit.narrow > 0 and fit.width_factor(32) > fit.width_factor(256)
    p = _profile("bench.gpu_models:MobileNetV2", input_shape=[3, 64, 64], batch_size=4)
    assert all(o.width > 0 for o in p.ops if o.layout == "batch")


def test_the_device_runs_new_rows_reach_the_model(tmp_path, monkeypatch):
    """Rows of bench/calibrate_model_kernels.py: a depthwise convolution's FLOPs count one input channel per
    output channel (NCHW ones fit against the CUDA cores' fp32 peak, whatever their dtype), and the host's
    per-tensor cost by optimizer implementation replaces the suite-fitted figure."""
    import csv
    import shutil

    from infra.catalog import CATALOG_DIR

    cat = tmp_path / "catalog"
    shutil.copytree(CATALOG_DIR, cat)
    columns = ["gpu", "section", "op", "dtype", "layout", "shape", "pass_", "ms", "tflops", "gbps", "source", "date"]
    rows = [dict(gpu="H200", section="conv", op="conv2d", dtype="bf16", layout="nhwc/dw", pass_="bwd",
                 shape=f"n64 c{c}->{c} {hw}x{hw} k7", ms=ms) for c, hw, ms in ((96, 56, 0.5), (384, 14, 0.16),
                                                                              (192, 28, 0.27))]
    rows.append(dict(gpu="H200", section="host_param", op="fused", dtype="fp32", shape="Adam", ms=0.004))
    with open(cat / "gpu_kernels_h200_zz_test.csv", "w", newline="") as f:
        w = csv.DictWriter(f, columns, lineterminator="\n")
        w.writeheader()
        w.writerows([{c: "" for c in columns} | r | dict(source="test", date="2026-11-28") for r in rows])
    monkeypatch.setenv("DLRUN_CATALOG_DIR", str(cat))
    cal, _ = gpu_calibration.calibration_for(gpu_spec("H200"))
    dw = cal.fits[("conv", "bf16", "nhwc/dw", "bwd")]
    flops = 2 * 2.0 * 64 * 96 * 56 * 56 * 49  # data and weight gradients, one input channel per group
    assert dw.seconds(flops, 2, gpu_spec("H200").peak_tflops("bf16") * 1e12) == pytest.approx(0.5e-3, rel=0.35)
    nchw = cal.fits[("conv", "fp32", "nchw/dw", "bwd")]  # the shipped rows of ConvNeXt's profiled step
    assert nchw.seconds(flops, 2, gpu_spec("H200").fp32_tflops * 1e12) == pytest.approx(2.19e-3, rel=0.35)
    assert cal.host_param_seconds == {"fused": 4e-6}
    fused = dataclasses.replace(_profile(), optimizer_impl="fused")
    assert sum(host_time.host_seconds(dataclasses.replace(fused, param_tensors=fused.param_tensors + 10), cal)) - \
        sum(host_time.host_seconds(fused, cal)) == pytest.approx(10 * 4e-6 * host_time.REAL_STEP_FACTOR)
