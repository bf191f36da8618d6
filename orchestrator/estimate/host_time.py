"""The host side of a GPU training step: how long the CPU takes to dispatch it, and how that meets the GPU's time.

What the host does each step, priced from what the calibration measured on its GPU machine's CPU:
- every recorded op: its class's dispatch per aten op (bench/calibrate_gpu.py 'host' rows: chains of one module
  type, plain and under autocast, forward and backward, the views around them included), else a prior
  (gpu_calibration.HOST_WEIGHTS × the host unit);
- cuDNN's RNN: the host launches every time step's kernels itself; per recorded launch, the time of the
  calibration's launch-bound 'lstm' rows (small hidden sizes, many steps);
- per parameter tensor: the optimizer's Python loop (foreach Adam groups the tensors, reads each `step` with two
  item() calls on CPU scalars), autograd's AccumulateGrad and zero_grad (PER_PARAM_SECONDS);
- the loop itself: fetching the batch, dispatching its pinned copy, loss.item().
The sum × REAL_STEP_FACTOR: a real model dispatches the same ops slower than a chain of one module type does (its
shapes vary, so the caching allocator's and cuDNN's plan lookups miss; its module calls and hooks).

A host is a CPU, not the GPU: an offer whose CPU is slower or faster per thread than the calibration's host
(configs/catalog/host_cpus.csv) scales all of it by the two CPUs' single-thread speeds.

Host and GPU overlap: the host queues kernels while the GPU runs earlier ones, but a step mixes stretches where
the GPU waits for the host (many small ops) with stretches where the host waits for the GPU (a few long kernels),
so the step is longer than the slower of the two when they are close: step = (host^p + gpu^p)^(1/p).

The constants below were measured from the 2026-11-28 H200 run (../shared/calibration/h200_device_run_2026-11-28:
host_steps.csv, host_ops.csv, breakdown.csv) on the suite's *seen* loops only (bench/estimator_gpu.py SUITE); the
held-out loops check them. `python bench/host_fit.py` derives them again from a run's files and prints both sets.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from orchestrator.estimate.gpu_calibration import HOST_STEP_SECONDS, HOST_WEIGHTS, host_unit_seconds
from orchestrator.estimate.step_ops import SYNC_OP

# host_ops.csv, seen loops: self CPU of Optimizer.step (foreach Adam) + zero_grad + AccumulateGrad (and its
# engine frame) + item(), deflated by the profiler's own cost, against the number of parameter tensors (8 to 202):
# a least-squares line (bench/host_fit.py). A calibration's 'host_param' rows (bench/calibrate_model_kernels.py,
# per optimizer implementation) replace the per-tensor figure where measured.
PER_PARAM_SECONDS = 24e-6
OPTIMIZER_STEP_SECONDS = 0.25e-3
# dispatched / summed host of the seen loops where nothing blocks the host (no RNN, no GradScaler sync):
# geometric mean (bench/host_fit.py)
REAL_STEP_FACTOR = 1.27
# the same for cuDNN's RNN launches: a training step's (seen LSTM loop: its dispatch but for the rest of its ops)
# over the launch-bound 'lstm' rows' bare forward + backward, per launch (bench/host_fit.py)
RNN_STEP_FACTOR = 1.68
# step wall against (dispatch, GPU busy) of the seen loops: the p of the smooth maximum that fits them best
OVERLAP_P = 5.0
# cuDNN RNN launches when the calibration has no launch-bound 'lstm' row: its measured 2026-11-28 H200 figure
DEFAULT_RNN_LAUNCH_SECONDS = 12.5e-6


@dataclass(frozen=True)
class HostCpu:
    """A CPU a GPU offer's host runs: its name and its single-thread speed relative to REFERENCE_HOST."""

    name: str
    speed: float
    source: str = ""


# the CPU the calibration's host rows were measured on (the H200 machine of the 2026-11-28 device run)
REFERENCE_HOST = HostCpu("the H200 calibration host (Intel Xeon, 16 vCPUs)", 1.0)


def rnn_launch_seconds(cal) -> float:
    return cal.rnn_launch_seconds or DEFAULT_RNN_LAUNCH_SECONDS


def op_host_seconds(op, cal, autocast: bool) -> float:
    """Host seconds of all `op.count` calls of one recorded op, on the calibration's host, in a real step."""
    measured = cal.host_op_seconds
    if op.kind == "rnn":  # the host launches each time step's kernels
        return op.kernel_launches * rnn_launch_seconds(cal) * RNN_STEP_FACTOR
    if op.kind == "host":
        return 0.0 if measured else op.count * host_unit_seconds(cal) * HOST_WEIGHTS["host"] * REAL_STEP_FACTOR
    pass_ = {"forward": "fwd", "backward": "bwd"}.get(op.phase, "")
    seconds = measured.get((op.kind, "bf16" if autocast else "fp32", pass_))
    if seconds is None:
        seconds = host_unit_seconds(cal) * HOST_WEIGHTS[op.phase or "backward"]
    return op.count * seconds * REAL_STEP_FACTOR


def host_seconds(profile, cal, host: HostCpu = REFERENCE_HOST) -> tuple[float, float]:
    """(host seconds of a step before GradScaler's sync, after it) on `host`."""
    autocast = getattr(profile, "precision", "fp32") in ("bf16", "fp16")
    before, after, synced = 0.0, 0.0, False
    order = ("forward", "backward", "optimizer")
    for op in sorted(profile.ops, key=lambda o: order.index(o.phase) if o.phase in order else 1):
        if op.name == SYNC_OP:
            synced = True
            continue
        cost = op_host_seconds(op, cal, autocast)
        if synced and op.phase == "optimizer":
            after += cost
        else:
            before += cost
    if not any(o.count for o in profile.ops):  # a reference profile: no ops to dispatch, no loop to model
        return 0.0, 0.0
    per_tensor = cal.host_param_seconds.get(getattr(profile, "optimizer_impl", "foreach"), PER_PARAM_SECONDS)
    per_param = getattr(profile, "param_tensors", 0) * per_tensor + OPTIMIZER_STEP_SECONDS
    per_param *= REAL_STEP_FACTOR
    if synced:
        after += per_param
    else:
        before += per_param
    before += HOST_STEP_SECONDS * REAL_STEP_FACTOR  # the loop itself
    return before / host.speed, after / host.speed


def overlapped(host: float, gpu: float) -> float:
    """A stretch of `host` seconds of dispatch over `gpu` seconds of kernels, as a step takes it."""
    if host <= 0 or gpu <= 0:
        return max(host, gpu)
    return (host ** OVERLAP_P + gpu ** OVERLAP_P) ** (1.0 / OVERLAP_P)


# --- the offers' CPUs ----------------------------------------------------------------------------------------

def _catalog_dir(catalog_dir: Path | None) -> Path:
    from infra.catalog import _dir

    return _dir(catalog_dir)


@lru_cache(maxsize=4)
def _host_cpus(catalog_dir: Path) -> dict[str, HostCpu]:
    path = catalog_dir / "host_cpus.csv"
    if not path.exists():
        return {}
    out = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            out[row["family"]] = HostCpu(row["cpu"], float(row["single_thread_vs_reference"]), row["source"])
    return out


def host_of(instance_type: str, catalog_dir: Path | None = None) -> HostCpu:
    """The CPU behind an instance type ('g5.xlarge' -> the g5 family's), else the calibration's host."""
    family = instance_type.split(".")[0] if "." in instance_type else "-".join(instance_type.split("-")[:1])
    return _host_cpus(_catalog_dir(catalog_dir)).get(family, REFERENCE_HOST)


def host_sigma(host: HostCpu) -> float:
    """The log-error of a host-bound step on `host`: the same kind of machine varies ±30 % from one to the next
    (host_steps.csv against estimator_gpu.txt, same day, same GPU), and a CPU known only by its model more."""
    return 0.25 if host is REFERENCE_HOST else math.hypot(0.25, 0.15)
