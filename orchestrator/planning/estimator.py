"""(profile, offer) -> Estimate: predicted step time, run time, hours and dollars, and memory fit.

Step time is a per-operator roofline: each op takes the longest of its FLOPs at the precision's
peak × an efficiency, its bytes at the memory bandwidth × an efficiency, and its kernel launches
(small models are launch-bound, which one global efficiency cannot express). Add a fixed per-step
overhead, the host→device copy of the batch and, with several GPUs, the gradient all-reduce.
The local backend uses measured steps instead. Finished runs correct the result per
(accelerator, model family) — see history_from_store.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from infra import kind, runs_here
from infra.catalog import GpuSpec, Offer, gpu_spec
from orchestrator.planning.data_inputs import transfer_seconds

# Calibrated priors (the few constants of the model). GPU figures: eager PyTorch on cloud GPUs.
COMPUTE_EFFICIENCY = {"fp32": 0.60, "tensor": 0.45}  # of datasheet peak, for matmul/conv
OLD_ARCH_COMPUTE_EFFICIENCY = 0.45  # Kepler/Maxwell: poorer cuDNN kernels
MEMORY_EFFICIENCY = 0.70  # of datasheet bandwidth, for elementwise/norm/optimizer ops
GPU_LAUNCH_SECONDS = 12e-6  # per op: dispatcher + kernel launch of eager PyTorch
GPU_STEP_OVERHEAD_SECONDS = 2e-3  # Python loop, DataLoader, loss.item() sync
CPU_COMPUTE_EFFICIENCY = 0.55  # of the measured matmul probe
CPU_LAUNCH_SECONDS = 15e-6
CPU_STEP_OVERHEAD_SECONDS = 1e-3
INTER_NODE_GBPS = 3.0  # effective all-reduce bandwidth between cloud nodes (GB/s)
MEMORY_SAFETY = 1.15  # allocator fragmentation and workspace
CUDA_CONTEXT_GB = 0.5
# provision + boot + install; a team cluster only starts the job (its runtime env: the code upload)
STARTUP_SECONDS = {"local": 5.0, "aws": 360.0, "gcp": 330.0, "cluster": 15.0}
STARTUP_PER_EXTRA_NODE = 30.0
PREEMPTIONS_PER_NODE_HOUR = {"aws": 0.05, "gcp": 0.10}
MIN_CORRECTION, MAX_CORRECTION = 0.2, 5.0
# per-epoch evaluation: forward passes (about 1/3 of a training step) over a held-out set of a
# quarter of the training size (the built-in jobs' 80/20 split)
EVAL_FRACTION = 0.25 / 3
# the job process's own start: data set load and model build (the built-in jobs: ~2 s here,
# mostly importing scikit-learn and reading the digits); part of the run, not of the cluster start-up
JOB_START_SECONDS = 2.0

CPU_THREAD_SCALING = 0.6  # speedup of torch training steps per extra core (assumed)


@dataclass(frozen=True)
class Estimate:
    hours: float
    cost: float
    fits: bool
    why_not: str | None
    step_seconds: float
    run_seconds: float
    startup_seconds: float
    needed_gb: float
    price_per_hour: float
    spot: bool = False
    preemption_seconds: float = 0.0
    raw_run_seconds: float = 0.0  # before the history correction
    correction: float = 1.0
    accelerator: str = "cpu"
    model_family: str = "unknown"
    basis: str = "roofline"  # roofline | measured
    start_seconds: float = 0.0  # the job process's fixed start inside run_seconds (corrected)
    data_seconds: float = 0.0  # moving the job's data: inputs to the nodes (inside startup_seconds)

    @property
    def total_seconds(self) -> float:
        return self.hours * 3600.0

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --- step time ---------------------------------------------------------------------------------

def _gpu_compute_tflops(gpu: GpuSpec, precision: str) -> float:
    peak = gpu.peak_tflops(precision)
    if gpu.architecture.startswith(("Kepler", "Maxwell")):
        eff = OLD_ARCH_COMPUTE_EFFICIENCY
    else:
        eff = COMPUTE_EFFICIENCY["tensor" if peak != gpu.fp32_tflops else "fp32"]
    return peak * eff


def _roofline(profile, flops_per_s: float, bytes_per_s: float, launch_s: float, split: int) -> float:
    """Sum over ops of max(compute, memory, launches); `split` GPUs share the batch."""
    total = 0.0
    for op in profile.ops:
        total += max(op.flops / split / flops_per_s, op.bytes / split / bytes_per_s, op.count * launch_s)
    return total


def gpu_step_seconds(profile, gpu: GpuSpec, gpus_per_node: int = 1, num_nodes: int = 1) -> float:
    n = max(1, gpus_per_node * num_nodes)
    step = _roofline(profile, _gpu_compute_tflops(gpu, profile.precision) * 1e12,
                     gpu.memory_bandwidth_gbps * 1e9 * MEMORY_EFFICIENCY, GPU_LAUNCH_SECONDS, n)
    step += GPU_STEP_OVERHEAD_SECONDS + profile.batch_input_bytes / n / (gpu.host_link_gbps * 1e9)
    if n > 1:  # ring all-reduce of the gradients
        link = INTER_NODE_GBPS if num_nodes > 1 else gpu.host_link_gbps
        step += 2 * (n - 1) / n * profile.grad_bytes / (link * 1e9)
    return step


def cpu_roofline_step_seconds(profile, probe: dict) -> float:
    return _roofline(profile, probe["matmul_gflops"] * 1e9 * CPU_COMPUTE_EFFICIENCY,
                     probe["copy_gbps"] * 1e9, CPU_LAUNCH_SECONDS, 1) + CPU_STEP_OVERHEAD_SECONDS


# --- memory -----------------------------------------------------------------------------------

def needed_gb(profile, gpus: int = 1) -> float:
    if profile.source != "measured":
        return 0.0
    per_gpu = profile.state_bytes + (profile.activation_bytes + profile.batch_input_bytes) / max(1, gpus)
    return per_gpu * MEMORY_SAFETY / 1e9 + CUDA_CONTEXT_GB


# --- the estimate -----------------------------------------------------------------------------

def _offer_step(profile, offer: Offer, num_nodes: int) -> tuple[float, str]:
    """(seconds per step, basis) for an offer, memoised on the profile (the planner asks 10,000×)."""
    cache = profile.__dict__.setdefault("_step_cache", {})
    here = runs_here(offer.cloud)
    key = (here, offer.accelerator, offer.accelerator_count, num_nodes)
    if key in cache:
        return cache[key]
    measured = profile.local_step_seconds
    if here and offer.accelerator is None:
        if "cpu" in measured:
            result = (measured["cpu"], "measured")
        else:
            from orchestrator.planning.probe import cpu_probe

            result = (cpu_roofline_step_seconds(profile, cpu_probe()), "roofline")
    elif here and "cuda" in measured:
        result = (measured["cuda"], "measured")
    elif offer.accelerator is None:  # a cloud CPU VM: this machine's CPU step, scaled by its cores
        if "cpu" in measured:
            base = measured["cpu"]
        else:
            from orchestrator.planning.probe import cpu_probe

            base = cpu_roofline_step_seconds(profile, cpu_probe())
        result = (base / cpu_speedup(offer.vcpus, profile.local_threads or 1), "scaled CPU")
    else:
        gpu = gpu_spec(offer.accelerator or "") or gpu_spec("T4")  # an unknown local GPU: assume a T4
        assert gpu is not None  # the shipped catalog (configs/catalog/gpus.csv) lists the T4
        result = (gpu_step_seconds(profile, gpu, max(1, offer.accelerator_count), num_nodes), "roofline")
    cache[key] = result
    return result


def cpu_speedup(vcpus: int, measured_threads: int = 1) -> float:
    """How much faster a VM with `vcpus` trains than the measured `measured_threads` torch threads.

    A vCPU is a hyperthread (two per core); torch's intra-op parallelism on small training steps
    scales well below linearly, so cores^CPU_THREAD_SCALING (an assumption to calibrate from
    finished cloud runs, which the history correction does per accelerator).
    """
    cores = max(1.0, vcpus / 2)
    return max(1.0, (cores / max(1, measured_threads)) ** CPU_THREAD_SCALING)


def job_start_seconds(offer: Offer) -> float:
    """The job's fixed start: on this machine measured once (Ray's job start and the process's imports,
    startup.py) plus the job's own data load; elsewhere the data-load prior alone."""
    if runs_here(offer.cloud):
        from orchestrator.planning.startup import local_startup_seconds

        return local_startup_seconds() + JOB_START_SECONDS
    return JOB_START_SECONDS


def startup_correction_for(history, accelerator: str, family: str) -> float:
    """The start-up term's correction (one per accelerator: the start is the machine's, whatever the
    model); where finished runs say nothing about it, the step's."""
    known = history.startup if isinstance(history, History) else {}
    key = _accelerator_key(accelerator)
    return known[key] if key in known else correction_for(history, accelerator, family)


def correction_for(history, accelerator: str, family: str) -> float:
    if not history:
        return 1.0
    return history.get((accelerator, family), 1.0)


def cluster_start_seconds(cloud: str, num_nodes: int = 1) -> float:
    """Seconds from launch until the cluster's Ray takes the job (boot, install, join), on this backend."""
    return STARTUP_SECONDS.get(kind(cloud), STARTUP_SECONDS["aws"]) + STARTUP_PER_EXTRA_NODE * (num_nodes - 1)


def estimate(profile, offer: Offer, *, spot: bool, num_nodes: int = 1, history=None,
             data_bytes: int = 0) -> Estimate:
    step, basis = _offer_step(profile, offer, num_nodes)
    accelerator = offer.accelerator or "cpu"
    correction = correction_for(history, accelerator, profile.model_family)
    start_correction = startup_correction_for(history, accelerator, profile.model_family)
    measured = profile.source == "measured"
    train = step * profile.total_steps * (1 + EVAL_FRACTION if measured else 1)
    if measured:
        start = job_start_seconds(offer)
    elif profile.source == "probe" and runs_here(offer.cloud):
        # the probe timed the job's process from its spawn (imports, data load): only Ray's share is missing
        from orchestrator.planning.startup import ray_share_seconds

        start = ray_share_seconds()
    else:
        start = 0.0
    raw_run = train + start
    run = train * correction + start * start_correction
    startup = cluster_start_seconds(offer.cloud, num_nodes)
    data = transfer_seconds(offer.cloud, data_bytes)  # every node syncs at once: one node's time
    startup += data

    preempt = 0.0
    if spot:
        rate = PREEMPTIONS_PER_NODE_HOUR.get(offer.cloud, 0.1) * num_nodes
        epoch_s = run / max(1, profile.epochs)
        lost = min(epoch_s, run) / 2  # checkpoints are written every epoch
        preempt = rate * run / 3600.0 * (startup + lost)

    gpus = max(1, offer.accelerator_count)
    need = needed_gb(profile, gpus)
    if offer.accelerator is None:
        have, what = offer.memory_gb, "CPU RAM"
        need = max(0.0, need - CUDA_CONTEXT_GB)
    else:
        have, what = offer.gpu_memory_gb, offer.accelerator
    fits = need <= have or have <= 0
    why = None if fits else f"{what}: needs {need:.1f} GB, has {have:g} GB"

    hourly = offer.hourly(spot) * num_nodes
    hours = (startup + run + preempt) / 3600.0
    return Estimate(hours=hours, cost=hours * hourly, fits=fits, why_not=why, step_seconds=step * correction,
                    run_seconds=run, startup_seconds=startup, needed_gb=need, price_per_hour=hourly, spot=spot,
                    preemption_seconds=preempt, raw_run_seconds=raw_run, correction=correction,
                    accelerator=accelerator, model_family=profile.model_family, basis=basis,
                    start_seconds=start * start_correction, data_seconds=data)


# --- learning from finished runs ----------------------------------------------------------------

def _damped(ratios: list[float]) -> float:
    """Median ratio, pulled toward 1 while there are few runs (one odd run must not swing it)."""
    if not ratios:
        return 1.0
    weight = len(ratios) / (len(ratios) + 1)
    factor = math.exp(weight * math.log(statistics.median(ratios)))
    return min(MAX_CORRECTION, max(MIN_CORRECTION, factor))


def _accelerator_key(accelerator: str | None) -> str:
    """The store records a CPU run as 'CPU', the estimator says 'cpu'."""
    return "cpu" if not accelerator or accelerator.upper() == "CPU" else accelerator


class History(dict):
    """(accelerator, model_family) -> step-time correction; .startup: accelerator -> start-up correction."""

    def __init__(self, steps=(), startup=None):
        super().__init__(steps)
        self.startup = dict(startup or {})


# how much the prior (both corrections 1) counts against the runs, each run weighing 1: little, since
# the start-up is one constant of the machine that a single small run already shows (0.05: one run
# moves a 2.5x start-up error to ~2.1x, three to ~2.3x)
STARTUP_PRIOR_WEIGHT = 0.05


def _gauss(m: list[list[float]], b: list[float]) -> list[float]:
    """Solve m·x = b (small, symmetric positive definite: no pivoting needed beyond the diagonal)."""
    n = len(b)
    m, b = [r[:] for r in m], b[:]
    for i in range(n):
        for k in range(i + 1, n):
            f = m[k][i] / m[i][i]
            for j in range(i, n):
                m[k][j] -= f * m[i][j]
            b[k] -= f * b[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def _clamp(v: float) -> float:
    return min(MAX_CORRECTION, max(MIN_CORRECTION, v))


def _solve(obs: list[tuple[str, float, float, float]]) -> tuple[float | None, dict[str, float]]:
    """From one accelerator's runs (family, raw start, raw training, actual): the start-up correction s,
    shared by every family (the start is the machine's), and a step correction c per family. Least
    squares on actual ≈ s·start + c_family·training in relative terms, pulled toward 1. Without any
    recorded start-up term: no s, and each family's c is the damped median ratio as before."""
    families = sorted({f for f, _, _, _ in obs})
    if not any(start > 0 for _, start, _, _ in obs):
        return None, {f: _damped([a / t for g, _, t, a in obs if g == f and t > 0]) for f in families}
    col = {f: i + 1 for i, f in enumerate(families)}
    n, lam = len(families) + 1, STARTUP_PRIOR_WEIGHT
    m, b = [[0.0] * n for _ in range(n)], [lam] * n
    for i in range(n):
        m[i][i] = lam
    for family, start, train, actual in obs:
        x = [0.0] * n
        x[0], x[col[family]] = start / actual, train / actual
        for i in range(n):
            b[i] += x[i]
            for j in range(n):
                m[i][j] += x[i] * x[j]
    sol = _gauss(m, b)
    return _clamp(sol[0]), {f: _clamp(sol[col[f]]) for f in families}


def fit_terms(runs) -> History:
    """runs: (accelerator, family, est_run_seconds, actual_run_seconds, est_start_seconds or None), in
    time order. A run that recorded its start-up term corrects both terms; the others the step only.
    Replaying in order turns each recorded (corrected) estimate back into the model's raw terms."""
    obs: dict[str, list[tuple[str, float, float, float]]] = {}
    for accelerator, family, est, actual, est_start in runs:
        if not est or not actual or est <= 0 or actual <= 0:
            continue
        seen = obs.setdefault(_accelerator_key(accelerator), [])
        family = family or "unknown"
        s_then, c_then = _solve(seen) if seen else (None, {})
        start = min(est_start or 0.0, est)
        seen.append((family, start / (s_then or 1.0), (est - start) / c_then.get(family, 1.0), actual))
    steps, startup = {}, {}
    for accelerator, seen in obs.items():
        s, c = _solve(seen)
        steps.update({(accelerator, f): v for f, v in c.items()})
        if s is not None:
            startup[accelerator] = s
    return History(steps, startup)


def history_from_store(store) -> History:
    """Correction factors per (accelerator, model_family) from the store's finished jobs."""
    return fit_terms((j.accelerator, j.model_family, j.est_run_seconds, j.actual_run_seconds, j.est_start_seconds)
                     for j in store.finished_runs())
