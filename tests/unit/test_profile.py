"""profile.measure on real torch models: FLOPs, bytes, activations, measured local steps, the cache."""
import json

import pytest

from orchestrator.estimate import profile
from orchestrator.planning.probe import cpu_probe
from orchestrator.planning.spec import Workload
from tests.support.models import HIDDEN, IN, OUT

pytestmark = pytest.mark.fresh_machine  # the CPU probe and the profile cache are what these tests measure


def workload(model="tests.support.models:TwoLayerMLP", **kw):
    base = dict(model=model, input_shape=[IN], batch_size=16, dataset_size=160, epochs=2)
    return Workload(**{**base, **kw})


def test_mlp_flops_params_and_state_bytes_match_the_formulas():
    p = profile.measure(workload(optimizer="adam"), measure_local=False)
    b = 16
    # forward 2·b·in·out per Linear; backward: weight grad for both, input grad only for the second
    fwd = 2 * b * IN * HIDDEN + 2 * b * HIDDEN * OUT
    bwd = 2 * b * IN * HIDDEN + 2 * (2 * b * HIDDEN * OUT)
    assert p.flops_per_step == fwd + bwd
    params = IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT
    assert p.params == params
    assert (p.weight_bytes, p.grad_bytes, p.optimizer_bytes) == (4 * params, 4 * params, 8 * params)
    sgd = profile.measure(workload(optimizer="sgd"), measure_local=False)
    assert sgd.optimizer_bytes == 4 * params
    assert p.batch_input_bytes == b * IN * 4 + b * 8
    assert p.model_family == "mlp" and p.total_steps == 20


def test_activation_memory_grows_with_the_batch_and_ops_are_split_by_kind():
    small = profile.measure(workload("tests.support.models:TinyCNN", input_shape=[1, 8, 8], batch_size=16),
                            measure_local=False)
    big = profile.measure(workload("tests.support.models:TinyCNN", input_shape=[1, 8, 8], batch_size=64),
                          measure_local=False)
    assert small.model_family == "conv"
    assert 3.0 < big.activation_bytes / small.activation_bytes <= 4.2
    names = {o.name for o in big.ops}
    assert {"convolution", "convolution_backward"} <= names
    assert sum(o.flops for o in big.ops) == pytest.approx(big.flops_per_step)
    assert sum(o.bytes for o in big.ops if o.flops == 0) > 0  # relu, pooling and Adam move memory without FLOPs
    half = profile.measure(workload("tests.support.models:TinyCNN", input_shape=[1, 8, 8], batch_size=64,
                                    precision="bf16"), measure_local=False)
    # autocast saves half-precision activations, beside the fp32 input and loss it keeps
    assert 0.5 * big.activation_bytes < half.activation_bytes < 0.7 * big.activation_bytes
    assert {o.dtype for o in half.ops if o.kind == "conv"} == {"bf16"}


def test_measure_times_real_local_steps_and_caches_the_profile(monkeypatch, dlrun_home):
    w = workload("tests.support.models:TinyCNN", input_shape=[1, 8, 8])
    p = profile.measure(w)
    assert 0 < p.local_step_seconds["cpu"] < 5
    files = list((dlrun_home / "profiles").glob("*.json"))
    assert any(json.loads(f.read_text()).get("model") == w.model for f in files)

    def boom(*a, **k):
        raise AssertionError("re-profiled a cached workload")

    monkeypatch.setattr(profile, "measure_local_step", boom)
    monkeypatch.setattr(profile, "measure_local_step_robust", boom)
    monkeypatch.setattr(profile, "_static_profile", boom)
    again = profile.measure(w)
    assert again.local_step_seconds == p.local_step_seconds and again.ops == p.ops


def test_a_huge_model_is_profiled_on_meta_without_timing_it_here():
    p = profile.measure(workload("tests.support.models:BigMLP", input_shape=[64], batch_size=32))
    assert p.params > 800_000_000
    assert p.state_bytes > 12e9
    assert p.local_step_seconds == {}  # the roofline says a CPU step would take too long


def test_cpu_probe_is_measured_once(dlrun_home):
    first = cpu_probe()
    assert first["matmul_gflops"] > 1 and first["copy_gbps"] > 0.1
    assert cpu_probe() == first
    assert (dlrun_home / "profiles" / "cpu_probe.json").exists()


def test_a_bad_model_reference_is_a_spec_error():
    from orchestrator.errors import SpecError

    with pytest.raises(SpecError, match="cannot import"):
        profile.measure(workload("tests.nope:Missing"), measure_local=False)
