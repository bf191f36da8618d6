"""The estimator: roofline behaviour, memory fit, spot overhead, local measured steps, history."""
import re

import pytest

from orchestrator.estimate import estimator, profile
from infra.catalog import Offer, load_offers
from orchestrator.planning.spec import Workload
from orchestrator.state.db import Store
from orchestrator.states import JobStatus
from tests.support.planning import LOCAL_CPU, synthetic


def offer(cloud="aws", acc="T4", count=1, mem=16, price=1.0, spot=0.3, itype=None, region="us-east-1"):
    return Offer(cloud=cloud, region=region, instance_type=itype or f"{acc}x{count}", accelerator=acc,
                 accelerator_count=count, gpu_memory_gb=mem, vcpus=8, memory_gb=64, price_per_hour=price,
                 spot_price_per_hour=spot)


def test_model_too_big_for_a_k80_is_excluded_with_the_reason():
    w = Workload(model="tests.support.models:BigMLP", input_shape=[64], batch_size=32, dataset_size=3200, epochs=1)
    p = profile.measure(w, measure_local=False)
    k80 = next(o for o in load_offers() if o.accelerator == "K80" and o.accelerator_count == 1)
    e = estimator.estimate(p, k80, spot=False)
    assert not e.fits
    m = re.fullmatch(r"K80: needs (\d+\.\d) GB, has 12 GB", e.why_not)
    assert m and float(m[1]) > 12
    a100 = next(o for o in load_offers() if o.accelerator == "A100-80GB")
    assert estimator.estimate(p, a100, spot=False).fits


def test_faster_gpus_and_more_gpus_shorten_a_compute_bound_step():
    p = synthetic(flops=5e12)
    t = {g: estimator.estimate(p, offer(acc=g), spot=False).step_seconds for g in ("K80", "T4", "A100", "H100")}
    assert t["K80"] > t["T4"] > t["A100"] > t["H100"]
    one = estimator.estimate(p, offer(acc="V100", count=1), spot=False).step_seconds
    four = estimator.estimate(p, offer(acc="V100", count=4), spot=False).step_seconds
    assert one / 4 < four < one / 2  # near-linear, less the all-reduce


def test_a_launch_bound_model_gains_little_from_a_bigger_gpu():
    """Per-op latency floor: 2000 tiny ops take about as long on an H100 as on an A100."""
    p = synthetic(flops=1e8, membytes=1e6, ops=2000)
    a100 = estimator.estimate(p, offer(acc="A100"), spot=False).step_seconds
    h100 = estimator.estimate(p, offer(acc="H100"), spot=False).step_seconds
    assert h100 == pytest.approx(a100, rel=0.1)
    big = synthetic(flops=1e14, ops=10)
    ratio = (estimator.estimate(big, offer(acc="A100"), spot=False).step_seconds
             / estimator.estimate(big, offer(acc="H100"), spot=False).step_seconds)
    assert ratio > 2.5  # FP32 peak 19.5 vs 67 TFLOPS


def test_cost_is_hours_times_price_and_spot_adds_expected_preemption_time():
    p = synthetic(flops=2e13, steps=20000)
    o = offer(price=2.0, spot=0.5)
    od = estimator.estimate(p, o, spot=False)
    sp = estimator.estimate(p, o, spot=True)
    assert od.cost == pytest.approx(od.hours * 2.0)
    assert sp.cost == pytest.approx(sp.hours * 0.5)
    assert od.preemption_seconds == 0 and sp.preemption_seconds > 0
    assert sp.hours == pytest.approx(od.hours + sp.preemption_seconds / 3600)
    assert od.hours * 3600 == pytest.approx(od.startup_seconds + od.run_seconds)
    two = estimator.estimate(p, o, spot=False, num_nodes=2)
    assert two.price_per_hour == 4.0 and two.startup_seconds > od.startup_seconds


def test_local_cpu_uses_the_measured_step_and_costs_nothing():
    p = synthetic(local={"cpu": 0.05}, steps=100)
    e = estimator.estimate(p, LOCAL_CPU, spot=False)
    assert e.basis == "measured" and e.step_seconds == 0.05 and e.cost == 0.0
    from orchestrator.planning.startup import local_startup_seconds

    assert e.raw_run_seconds == pytest.approx(0.05 * 100 * (1 + estimator.EVAL_FRACTION) + estimator.JOB_START_SECONDS
                                              + local_startup_seconds())  # measured once, then cached
    assert e.startup_seconds < 60


def test_a_cloud_cpu_vm_runs_the_job_with_the_threads_it_had_here(monkeypatch):
    """Ray starts a job's entrypoint with OMP_NUM_THREADS=1 on every node unless the job sets it, and the built-in jobs
    take --cpu-threads 1: a one-thread job is as fast on 16 vCPUs as on 2 (before: 8 cores^0.6 = 3.5x faster). A job
    whose env: asks for 8 threads gains from cores it could not have here (2 CPUs)."""
    monkeypatch.setattr(estimator.os, "cpu_count", lambda: 2)
    cpu_vm = {n: Offer(cloud="aws", region="us-east-1", instance_type=f"c{n}", accelerator=None, accelerator_count=0,
                       gpu_memory_gb=0.0, vcpus=n, memory_gb=4.0 * n, price_per_hour=0.05 * n, spot_price_per_hour=None)
              for n in (2, 16)}
    one = synthetic(local={"cpu": 0.05})
    one.local_threads = 1
    steps = {n: estimator.estimate(one, o, spot=False).step_seconds for n, o in cpu_vm.items()}
    assert steps[2] == steps[16] == pytest.approx(0.05)
    assert estimator.cpu_speedup(16, 8) == pytest.approx(4 ** estimator.CPU_THREAD_SCALING)  # 8 cores there, 2 here
    assert estimator.cpu_speedup(2, 8) == pytest.approx(0.5 ** estimator.CPU_THREAD_SCALING)  # 1 core there


def test_history_correction_converges_on_the_true_ratio():
    """Each run's estimate carries the correction of its time (as the runner records it); replaying the
    store's history recovers the raw ratio instead of drifting back toward 1."""
    store, p, t4 = Store(), synthetic(), offer(acc="T4")
    truth = 2.0 * estimator.estimate(p, t4, spot=False).raw_run_seconds
    for i in range(8):
        est = estimator.estimate(p, t4, spot=False, history=estimator.history_from_store(store))
        jid = store.create_job(name=f"j{i}", spec_hash="h", spec_json="{}", accelerator="T4", model_family="conv",
                               est_run_seconds=est.run_seconds, est_start_seconds=est.start_seconds)
        store.finish(jid, JobStatus.SUCCEEDED, "", actual_seconds=truth, actual_run_seconds=truth)
    assert estimator.history_from_store(store)[("T4", "conv")] == pytest.approx(2.0, rel=0.12)


def test_one_odd_run_is_damped_not_taken_at_face_value():
    store = Store()
    jid = store.create_job(name="odd", spec_hash="h", spec_json="{}", accelerator="T4", model_family="conv",
                           est_run_seconds=100.0)
    store.finish(jid, JobStatus.SUCCEEDED, "", actual_seconds=300.0, actual_run_seconds=300.0)
    assert 1.0 < estimator.history_from_store(store)[("T4", "conv")] < 2.0


def test_history_from_the_store_corrects_that_gpu_and_family_only():
    """As the runner does: each job's est_run_seconds comes from a plan made with the store's history."""
    store, p, t4 = Store(), synthetic(), offer(acc="T4")
    truth = 1.5 * estimator.estimate(p, t4, spot=False).raw_run_seconds
    for i in range(5):
        est = estimator.estimate(p, t4, spot=False, history=estimator.history_from_store(store))
        jid = store.create_job(name=f"j{i}", spec_hash="h", spec_json="{}", accelerator="T4",
                               model_family="conv", est_run_seconds=est.run_seconds)
        store.finish(jid, JobStatus.SUCCEEDED, "", actual_seconds=truth, actual_run_seconds=truth)
    failed = store.create_job(name="bad", spec_hash="h", spec_json="{}", accelerator="T4", model_family="conv",
                              est_run_seconds=100.0)
    store.finish(failed, JobStatus.FAILED, "", actual_seconds=1.0, actual_run_seconds=1.0)
    history = estimator.history_from_store(store)
    assert set(history) == {("T4", "conv")} and 1.3 < history[("T4", "conv")] <= 1.5
    p = synthetic()
    plain = estimator.estimate(p, offer(acc="T4"), spot=False)
    corrected = estimator.estimate(p, offer(acc="T4"), spot=False, history=history)
    assert corrected.run_seconds == pytest.approx(plain.run_seconds * history[("T4", "conv")])
    other = estimator.estimate(p, offer(acc="L4"), spot=False, history=history)
    assert other.correction == 1.0
