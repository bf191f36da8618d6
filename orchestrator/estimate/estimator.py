"""(profile, offer) -> Estimate: predicted step time (with its range), run time, hours and dollars, memory fit.

On a GPU the step is priced kernel by kernel from the GPU's calibration (gpu_time.py: what CUDA runs, at the
math mode PyTorch picks, overlapped with the host's dispatch). This machine's CPU or CUDA GPU uses the steps
measured on it; other GPUs are then scaled from this machine's GPU, each kernel class by the ratio of the two
GPUs' predictions for it, weighted by its time measured here (Habitat's method). A CPU step too big to time
here is a roofline of the CPU probe. Every estimate carries a range (90 %) from the calibration's residuals,
narrowed by finished runs, which also correct the result per (accelerator, model family) — see
history_from_store. The budget is checked against the range's high end.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from infra import kind, runs_here
from infra.catalog import GpuSpec, Offer, gpu_spec
from orchestrator.planning.data_inputs import transfer_seconds
from orchestrator.planning.image_check import pull_seconds
from orchestrator.estimate.host_time import REFERENCE_HOST, HostCpu, host_of
from orchestrator.estimate.history import (History, correction_for, fit_terms, history_from_store, runs_behind,
                                           startup_correction_for)

__all__ = ["Estimate", "History", "estimate", "estimate_on_gpu", "fit_terms", "gpu_step", "history_from_store"]

# Priors of the CPU model (the GPU's are calibration data: gpu_calibration.py)
CPU_COMPUTE_EFFICIENCY = 0.55  # of the measured matmul probe
CPU_LAUNCH_SECONDS = 15e-6
CPU_STEP_OVERHEAD_SECONDS = 1e-3
MEMORY_SAFETY = 1.15  # allocator fragmentation and workspace
CUDA_CONTEXT_GB = 0.5
# provision + boot + install; a team cluster only starts the job (its runtime env: the code upload)
STARTUP_SECONDS = {"local": 5.0, "aws": 360.0, "gcp": 330.0, "cluster": 15.0}
STARTUP_PER_EXTRA_NODE = 30.0
PREEMPTIONS_PER_NODE_HOUR = {"aws": 0.05, "gcp": 0.10}
# per-epoch evaluation: forward passes (about 1/3 of a training step) over a held-out set of a
# quarter of the training size (the built-in jobs' 80/20 split)
EVAL_FRACTION = 0.25 / 3
# the job process's own start: data set load and model build (the built-in jobs: ~2 s here,
# mostly importing scikit-learn and reading the digits); part of the run, not of the cluster start-up
JOB_START_SECONDS = 2.0
# a CUDA job's own start on top of that: importing the CUDA build of torch (3.4-4.4 s on the H200's host
# against ~1.5 s for the CPU wheel), the CUDA context (0.3-0.4 s) and cuDNN's initialisation (0.2-0.6 s)
GPU_JOB_START_SECONDS = 3.2
# the log-sigma of a step that was measured (on this machine's CPU or GPU), and of a CPU step scaled to a VM
MEASURED_SIGMA, SCALED_CPU_SIGMA, CPU_ROOFLINE_SIGMA, REFERENCE_SIGMA = 0.08, 0.35, 0.5, 0.3
RANGE_Z = 1.645  # the range is the central 90 %


def range_factor(sigma: float, runs: int = 0) -> float:
    """The range's high end over the estimate (and the estimate over the low end): the central 90 % of a
    log-normal error of `sigma`, narrowed by the finished runs behind the correction."""
    return math.exp(RANGE_Z * sigma / math.sqrt(1 + runs))


def _train_seconds(profile, step: float) -> float:
    """The run's steps (a measured workload's also its per-epoch evaluation)."""
    return step * profile.total_steps * (1 + EVAL_FRACTION if profile.source == "measured" else 1)

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
    step_low: float = 0.0  # the step's range (90 %), corrected like step_seconds
    step_high: float = 0.0
    hours_high: float = 0.0  # the whole job at the range's high end: what the budget is checked against
    cost_high: float = 0.0
    detail: str = ""  # where the step's figures come from, in words (calibration, host CPU assumed)

    @property
    def total_seconds(self) -> float:
        return self.hours * 3600.0

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# --- step time ---------------------------------------------------------------------------------

def _roofline(profile, flops_per_s: float, bytes_per_s: float, launch_s: float, split: int) -> float:
    """Sum over ops of max(compute, memory, launches); `split` cores or GPUs share the batch."""
    total = 0.0
    for op in profile.ops:
        if op.kind == "host":
            continue
        total += max(op.flops / split / flops_per_s, op.bytes / split / bytes_per_s, op.kernel_launches * launch_s)
    return total


def gpu_step(profile, gpu: GpuSpec, gpus_per_node: int = 1, num_nodes: int = 1, host: HostCpu = REFERENCE_HOST):
    """The step on `gpu` with `host`'s CPU (gpu_time.StepTime: seconds, sigma, basis), memoised on the profile."""
    from orchestrator.estimate.gpu_time import gpu_step as price

    cache = profile.__dict__.setdefault("_gpu_cache", {})
    key = (gpu.name, gpus_per_node, num_nodes, host.name)
    if key not in cache:
        cache[key] = price(profile, gpu, gpus_per_node, num_nodes, host)
    return cache[key]


def gpu_step_seconds(profile, gpu: GpuSpec, gpus_per_node: int = 1, num_nodes: int = 1) -> float:
    return gpu_step(profile, gpu, gpus_per_node, num_nodes).seconds


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

@dataclass(frozen=True)
class StepBasis:
    seconds: float
    basis: str  # measured | scaled from this machine's GPU | roofline | scaled CPU
    sigma: float  # log-error at one sigma
    detail: str = ""  # where the figures come from, in words


def _offer_step(profile, offer: Offer, num_nodes: int) -> StepBasis:
    """The step of an offer and its basis, memoised on the profile (the planner asks 10,000×)."""
    cache = profile.__dict__.setdefault("_step_cache", {})
    here = runs_here(offer.cloud)
    host = REFERENCE_HOST if here or not offer.accelerator else host_of(offer.instance_type)
    key = (here, offer.accelerator, offer.accelerator_count, num_nodes, offer.vcpus if not offer.accelerator else 0,
           host.name)
    if key not in cache:
        cache[key] = _step_basis(profile, offer.accelerator, offer.accelerator_count, here, num_nodes, offer.vcpus,
                                 host)
    return cache[key]


def _cpu_step(profile) -> tuple[float, bool]:
    """(this machine's CPU step, measured?)"""
    if "cpu" in profile.local_step_seconds:
        return profile.local_step_seconds["cpu"], True
    from orchestrator.planning.probe import cpu_probe

    return cpu_roofline_step_seconds(profile, cpu_probe()), False


def _step_basis(profile, accelerator: str | None, count: int, here: bool, num_nodes: int = 1,
                vcpus: int = 1, host: HostCpu = REFERENCE_HOST) -> StepBasis:
    measured = profile.local_step_seconds
    reference = profile.source != "measured"
    if accelerator is None:
        base, timed = _cpu_step(profile)
        if here:
            return StepBasis(base, "measured" if timed else "roofline",
                             MEASURED_SIGMA if timed else CPU_ROOFLINE_SIGMA)
        return StepBasis(base / cpu_speedup(vcpus, profile.local_threads or 1), "scaled CPU", SCALED_CPU_SIGMA)
    count = max(1, count)
    local_gpu = profile.gpu_name
    if here and "cuda" in measured and count == 1 and (not local_gpu or _same_gpu(accelerator, local_gpu)):
        return StepBasis(measured["cuda"], "measured", MEASURED_SIGMA, f"timed on this machine's {local_gpu or 'GPU'}")
    gpu = gpu_spec(accelerator)
    if gpu is None:  # a GPU the table does not know: only a measurement here can say (planner excludes it otherwise)
        timed = here and "cuda" in measured
        return StepBasis(measured["cuda"] if timed else math.inf, "measured" if timed else "unknown GPU",
                         MEASURED_SIGMA)
    step = gpu_step(profile, gpu, count, num_nodes, host)
    here_spec = gpu_spec(local_gpu) if local_gpu and "cuda" in measured else None
    if here_spec is not None:  # Habitat's method: this GPU's measured step × the ratio of the two predictions
        seconds, how = scaled_from_here(profile, measured["cuda"], step, gpu_step(profile, here_spec))
        return StepBasis(seconds, f"scaled from this machine's {here_spec.name}",
                         math.hypot(MEASURED_SIGMA, step.sigma / 2), f"measured on this machine's {here_spec.name}, "
                         f"scaled by the predictions' {how} ({step.basis})")
    sigma = REFERENCE_SIGMA if reference else step.sigma
    return StepBasis(step.seconds, "roofline", sigma, step.basis)


# a step whose kernels keep the GPU busy less than this share of it is bound by its host here
GPU_BOUND_SHARE = 0.8


def scaled_from_here(profile, measured: float, there, here) -> tuple[float, str]:
    """(seconds of a step on another GPU, how it was scaled) from this machine's measured step and the two GPUs'
    predictions (gpu_time.StepTime). With the measured step's GPU time per kernel class (profile.local_gpu_kinds)
    each class scales by its own predicted ratio, weighted by what it measured here, not by what the model
    thought its share was; a host-bound step keeps its host's time. Else the whole steps' ratio."""
    kinds = getattr(profile, "local_gpu_kinds", None) or {}
    busy = sum(kinds.values())
    if busy <= 0 or here.gpu_seconds <= 0:
        return measured * there.seconds / here.seconds, "ratio"
    whole = there.gpu_seconds / here.gpu_seconds

    def ratio(kind: str) -> float:
        a, b = there.by_kind.get(kind, 0.0), here.by_kind.get(kind, 0.0)
        return a / b if a > 0 and b > 0 else whole

    r = sum(t * ratio(k) for k, t in kinds.items()) / busy
    if busy >= GPU_BOUND_SHARE * measured:  # the GPU sets the pace here; a faster one may leave it to the host
        return max(measured * r, here.host_seconds), "ratios per kernel class"
    return max(measured, measured - busy + busy * r), "ratios per kernel class (host-bound here)"


def _same_gpu(accelerator: str | None, local_gpu: str) -> bool:
    a, b = gpu_spec(accelerator or ""), gpu_spec(local_gpu)
    return (a.name == b.name) if a and b else (accelerator or "").upper() == local_gpu.upper()


def cpu_speedup(vcpus: int, job_threads: int = 1) -> float:
    """How much faster a VM with `vcpus` runs the job's CPU steps than this machine did with `job_threads` torch
    threads. The job runs as many threads there as here: Ray gives a job's entrypoint OMP_NUM_THREADS=1 on every
    node unless the job's env: sets it (the probe runs it so: planning/job_probe.py), and the built-in jobs take
    --cpu-threads 1 (profile.LOCAL_CPU_THREADS). So only a job with more threads than this machine has CPUs gains
    from a bigger VM: by the cores it can use there over the CPUs it had here, ^CPU_THREAD_SCALING (an assumption to
    calibrate from finished cloud runs, which the history correction does per accelerator). A vCPU is a
    hyperthread, two per core."""
    there = min(job_threads, max(1, vcpus // 2))
    here = min(job_threads, os.cpu_count() or 1)
    return (max(1, there) / max(1, here)) ** CPU_THREAD_SCALING


def job_start_seconds(offer: Offer) -> float:
    """The job's fixed start: on this machine measured once (Ray's job start and the process's imports,
    startup.py) plus the job's own data load; elsewhere the data-load prior alone."""
    gpu = GPU_JOB_START_SECONDS if offer.accelerator else 0.0
    if runs_here(offer.cloud):
        from orchestrator.planning.startup import local_startup_seconds

        return local_startup_seconds() + JOB_START_SECONDS + gpu
    return JOB_START_SECONDS + gpu


def cluster_start_seconds(cloud: str, num_nodes: int = 1) -> float:
    """Seconds from launch until the cluster's Ray takes the job (boot, install, join), on this backend."""
    return STARTUP_SECONDS.get(kind(cloud), STARTUP_SECONDS["aws"]) + STARTUP_PER_EXTRA_NODE * (num_nodes - 1)


def estimate(profile, offer: Offer, *, spot: bool, num_nodes: int = 1, history=None,
             data_bytes: int = 0, image_bytes: int = 0, local_env_seconds: float = 0.0) -> Estimate:
    priced = _offer_step(profile, offer, num_nodes)
    step, basis = priced.seconds, priced.basis
    accelerator = offer.accelerator or "cpu"
    correction = correction_for(history, accelerator, profile.model_family)
    start_correction = startup_correction_for(history, accelerator, profile.model_family)
    train = _train_seconds(profile, step)
    if profile.source == "measured":
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
    startup += data + pull_seconds(offer.cloud, image_bytes)  # the job's container image, if any
    if runs_here(offer.cloud):
        startup += local_env_seconds  # Ray's pip env for requirements dlrun's Python lacks

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
    if math.isinf(step):
        fits, why = False, (f"GPU {accelerator}: not in configs/catalog/gpus.csv and not measured here (dlrun times "
                            "a job's steps on this machine's GPU when its torch sees CUDA)")

    hourly = offer.hourly(spot) * num_nodes
    hours = (startup + run + preempt) / 3600.0
    spread = range_factor(priced.sigma, runs_behind(history, accelerator, profile.model_family))
    run_high = train * correction * spread + start * start_correction
    hours_high = (startup + run_high + preempt * spread) / 3600.0
    return Estimate(hours=hours, cost=hours * hourly, fits=fits, why_not=why, step_seconds=step * correction,
                    run_seconds=run, startup_seconds=startup, needed_gb=need, price_per_hour=hourly, spot=spot,
                    preemption_seconds=preempt, raw_run_seconds=raw_run, correction=correction,
                    accelerator=accelerator, model_family=profile.model_family, basis=basis,
                    start_seconds=start * start_correction, data_seconds=data,
                    step_low=step * correction / spread, step_high=step * correction * spread,
                    hours_high=hours_high, cost_high=hours_high * hourly, detail=priced.detail)


@dataclass(frozen=True)
class GpuEstimate:
    """`dlrun estimate`: the job on `count` × `gpu`, whether or not anyone offers it."""

    gpu: str
    count: int
    step_seconds: float
    low: float  # the step's range (90 %)
    high: float
    samples_per_second: float
    run_seconds: float  # the job's run (its steps, evaluation and process start), not a cluster's start-up
    basis: str  # measured here | scaled from this machine's GPU | roofline, and 'corrected by N finished runs'
    detail: str  # where the figures come from, in words
    start_seconds: float = 0.0  # the job process's own start inside run_seconds (imports, CUDA, data load)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def estimate_on_gpu(profile, gpu: str, count: int = 1, *, here: bool = False, history=None) -> GpuEstimate:
    """The job's step, throughput and run on `count` × `gpu` (a name of the GPU table, or this machine's)."""
    priced = _step_basis(profile, gpu, count, here)
    family = profile.model_family
    correction = correction_for(history, gpu, family)
    runs = runs_behind(history, gpu, family)
    spread = range_factor(priced.sigma, runs)
    step = priced.seconds * correction
    train = _train_seconds(profile, step)
    start = JOB_START_SECONDS + GPU_JOB_START_SECONDS if profile.source == "measured" else 0.0
    basis = "measured here" if priced.basis == "measured" else priced.basis
    if runs:
        basis += f", corrected by {runs} finished run{'s' if runs != 1 else ''}"
    return GpuEstimate(gpu=gpu, count=count, step_seconds=step, low=step / spread, high=step * spread,
                       samples_per_second=profile.batch_size / step if step > 0 else 0.0,
                       run_seconds=train + start, basis=basis, detail=priced.detail, start_seconds=start)
