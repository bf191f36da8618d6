"""How fast a GPU runs each kernel class, from measured kernels: a latency per launch and a sustained efficiency.

The rows are microbenchmarks (configs/catalog/gpu_kernels*.csv, each with its source and date: the H200 measured
on 2026-11-27, public per-kernel figures of other GPUs, and `make calibrate-gpu` on the GPU at hand). Per GPU
and (class, math mode, layout, pass) the kernels fit seconds = launches × latency + work / (peak × efficiency),
work being FLOPs at the datasheet peak of the math mode (GEMM, convolution, attention, cuDNN's RNN, whose
launches are its time steps) or bytes at the memory bandwidth (elementwise, normalisation, optimizer): small
kernels pay the latency (they do not fill the GPU), large ones the efficiency. A GPU without its own rows
takes the geometric mean of the fits of the GPUs that measured that class, and its range widens for it.

Stdlib only: read on every plan.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from infra.catalog import GpuSpec, _dir, gpu_spec
from orchestrator.estimate import kernels

# A single op timed with CUDA events includes part of its launch (the host enqueues it while the event runs):
# on the H200 a 2048³ bf16 GEMM times 27 us where 0.8 of peak takes 22, and a chain of tiny adds runs 7.6 us
# an op, host-bound. What is left after this is the kernel's own time on a busy stream.
EVENT_LAUNCH_SECONDS = 6e-6
MIN_KERNEL_SECONDS = 2.5e-6
# bytes an optimizer step moves per parameter, as the ops step_ops.py records them (fp32 state):
# Adam foreach: lerp_ m (12), mul_ v (8), addcmul_ v (16), sqrt (8), div_ (8), add_ eps (8), addcdiv_ p (16);
# fused Adam: reads p, g, m, v and writes p, m, v once (28); SGD momentum foreach: mul_ (8), add_ (12), add_ (12)
OPTIMIZER_BYTES_PER_PARAM = {"adam foreach": 76, "adamw foreach": 84, "adam fused": 28,
                             "sgd-momentum foreach": 32}
OPTIMIZER_OPS = {"adam foreach": (7, 3), "adamw foreach": (8, 3), "adam fused": (1, 4),
                 "sgd-momentum foreach": (3, 2)}  # (foreach ops, tensor lists of the deepest)
MAX_LATENCY_SECONDS = 25e-6
MAX_EFFICIENCY = 0.95
UNFITTED_SIGMA = 0.3  # a class with one or two measured kernels
# A class a GPU has not measured is priced with the geometric mean of the fits of every GPU that measured it
# (an efficiency is a share of each GPU's own datasheet peak, so it travels). Predicting each measured GPU's
# kernels that way from the other GPUs' fits (bench/gpu_transfer.py, 672 kernels of 19 GPUs in the catalog of
# 2026-11-28) leaves a log-error of 0.44 RMS (GEMM 0.44, normalisation 0.30, elementwise 0.30, convolution
# 0.83): the extra sigma. (0.40 before the H200's device-run rows: its small kernels, timed on a slower host,
# are the hardest for other GPUs' fits.) Pooling beat the nearest GPU of the same architecture (x1.35 vs x1.44,
# worst GPU x1.60 vs x2.05): one power-capped L4 lent to an RTX 4090 made it twice too slow.
BORROWED_SIGMA = 0.44


@dataclass
class Fit:
    """One kernel class on one GPU: seconds = launches × latency + work / (peak × efficiency).

    The latency is what a kernel of the class costs however small (its launch, its tail, a wave that does
    not fill the GPU); the efficiency the share of the datasheet peak (of its math mode, or of the memory
    bandwidth) that large kernels sustain. Fitted by relative least squares to the class's measured kernels;
    `sigma` is the log-residual of those kernels around the fit (shapes the two numbers do not explain)."""

    latency: float
    efficiency: float
    sigma: float
    points: int
    narrow: float = 0.0  # the width (a conv's GEMM side, a BatchNorm's channels) at which efficiency halves (0: none)

    def seconds(self, work: float, launches: float, peak: float, width: int = 0) -> float:
        return launches * self.latency + work * self.width_factor(width) / (peak * self.efficiency)

    def width_factor(self, width: int) -> float:
        return width_factor(self.narrow, width)


def width_factor(narrow: float, width: int) -> float:
    """How much slower than a wide kernel of its class a kernel `width` wide runs (its GEMM's narrower side: few
    channels leave the tensor cores' tiles part empty), for a class whose efficiency halves at `narrow`."""
    return 1.0 + narrow / width if narrow and width > 0 else 1.0


@dataclass
class GpuCalibration:
    gpu: str
    fits: dict[tuple[str, str, str, str], Fit] = field(default_factory=dict)  # (kind, math, layout, pass)
    sources: set[str] = field(default_factory=set)
    host_unit_seconds: float | None = None  # its host's dispatch of one forward op (HOST_WEIGHTS)
    # its host's measured dispatch per aten op: (kind, "fp32" | "bf16" under autocast, "fwd" | "bwd") -> seconds
    host_op_seconds: dict[tuple[str, str, str], float] = field(default_factory=dict)
    rnn_launch_seconds: float | None = None  # its host's cuDNN RNN launch, from launch-bound 'lstm' rows
    # its host's per-parameter-tensor seconds of a step (zero_grad, AccumulateGrad, the optimizer's loop) by
    # optimizer implementation ('host_param' rows of bench/calibrate_model_kernels.py)
    host_param_seconds: dict[str, float] = field(default_factory=dict)


# The host's dispatch, relative per op by where it is issued: a forward op pays the Python module call and
# autograd's recording, a backward op only the C++ engine, a foreach call the optimizer's Python grouping, a view
# or an allocation the dispatcher alone. The scale (seconds of one forward op) comes from a measured host-bound
# step: 'launch' row 'mlp20 step adam' (20 × Linear(64, 64) + ReLU, batch 32, foreach Adam), whose ops step_ops
# records as MLP20_TALLY (tests/unit/test_gpu_model.py checks the tally against the recorder).
HOST_WEIGHTS = {"forward": 1.0, "backward": 0.7, "optimizer": 2.5, "host": 0.15}
MLP20_TALLY = {"forward": 42, "backward": 81, "optimizer": 8, "host": 380}
# Where a GPU's calibration has `host` rows (bench/calibrate_gpu.py: chains of one module type, each class's cost
# per op solved from them), forward and backward ops of those classes take their measured cost, which includes
# the views around them, and the prior above prices only the rest (optimizer, attention, RNN ops).
HOST_STEP_SECONDS = 60e-6  # the loop itself: zero_grad, fetching the batch, loss.item()
DEFAULT_HOST_UNIT_SECONDS = 20e-6


def _host_unit(step_seconds: float) -> float:
    units = sum(HOST_WEIGHTS[k] * n for k, n in MLP20_TALLY.items())
    return max(step_seconds - HOST_STEP_SECONDS, 1e-6) / units


# --- reading the rows --------------------------------------------------------------------------

_CONV = re.compile(r"n(\d+) c(\d+)->(\d+) (\d+)x(\d+) k(\d+)")
_LSTM = re.compile(r"b(\d+) s(\d+) h(\d+) L(\d+)")
_ATTN = re.compile(r"b(\d+) h(\d+) s(\d+) d(\d+)")
RNN_LAUNCH_BOUND_HIDDEN = 256  # an 'lstm' row this narrow or narrower is launch-bound on a datacenter GPU
_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


def conv_width(in_channels: int, out_channels: int, taps: int, groups: int = 1) -> int:
    """The narrower side of a convolution's implicit GEMM, per group: its out channels (N) or its in channels
    × kernel taps (K). On the H200 the forward kernels of one FLOP count run 0.6× as fast at width 64 as at 512
    (../shared/calibration: 3×3 c64 56×56 vs c512 7×7), which one efficiency per class cannot say."""
    return max(1, min(out_channels // groups, in_channels // groups * taps))


_BATCHNORM = re.compile(r"n(\d+) c(\d+) (\d+)x(\d+)")


def row_width(row: dict) -> int:
    """The width of a measured row: a convolution's (conv_width), a BatchNorm's channels (cuDNN's NCHW BatchNorm
    reduces each channel over N×H×W in one block of threads: few channels leave the GPU part idle, as the H200's
    n256 c64 56×56 backward at 530 GB/s against n64 c256's 1650 shows); 0 for other rows."""
    if row["section"] == "mem" and row["op"].startswith("batchnorm") and (b := _BATCHNORM.fullmatch(row["shape"])):
        return int(b.group(2))
    c = _CONV.fullmatch(row["shape"]) if row["section"] == "conv" else None
    if not c:
        return 0
    _, cin, cout, _, _, ks = (int(v) for v in c.groups())
    return conv_width(cin, cout, ks * ks)


def conv_layout(layout: str, in_channels: int) -> str:
    """A convolution's calibration layout: cuDNN runs a few-channel input (an RGB stem) with its own kernels."""
    return f"{layout}/c<8" if in_channels < 8 else layout


def _kernel_seconds(ms: float) -> float:
    return max(ms * 1e-3 - EVENT_LAUNCH_SECONDS, MIN_KERNEL_SECONDS)


def _sample(row: dict) -> tuple[tuple[str, str, str, str], float, int, str] | None:
    """(fit key, work: FLOPs or bytes, kernel launches, 'compute' | 'memory') of a row; None: not a kernel."""
    section, op, dtype, shape = row["section"], row["op"], row["dtype"], row["shape"]
    if section == "gemm":
        m, n, k = (int(v) for v in shape.split("x"))
        layout = row["layout"] if row["layout"].startswith(kernels.UNALIGNED) else ""
        return ("gemm", dtype, layout, ""), 2.0 * m * n * k, 1, "compute"
    if section == "conv" and (c := _CONV.fullmatch(shape)):
        nb, cin, cout, h, w, ks = (int(v) for v in c.groups())
        depthwise = row["layout"].endswith(kernels.DEPTHWISE)  # one input channel per group
        fwd = 2.0 * nb * cout * h * w * cin * ks * ks / (cin if depthwise else 1)
        layout = conv_layout(row["layout"], cin)
        bwd = row["pass_"] == "bwd"  # two kernels: the data and the weight gradients
        key = ("conv", "fp32" if kernels.on_cuda_cores(layout) else dtype, layout, row["pass_"])
        return key, fwd * (2 if bwd else 1), 2 if bwd else 1, "compute"
    if section == "lstm" and (m := _LSTM.fullmatch(shape)):
        b, s, h, layers = (int(v) for v in m.groups())
        flops = 3 * layers * kernels.rnn_forward_flops("LSTM", b, s, h, h)
        return ("rnn", dtype, "", ""), flops, 3 * s * layers, "compute"
    if section == "attn" and op.startswith("sdpa") and (a := _ATTN.fullmatch(shape)):
        b, heads, s, d = (int(v) for v in a.groups())
        flops = 3.5 * kernels.attention_flops(b * heads, s, s, d, d, False)
        return ("attention", dtype, "", ""), flops, 2, "compute"  # forward and backward
    if section == "mem" and op == "cross_entropy":
        return None  # measured for the large-vocabulary loss (bench/calibrate_model_kernels.py), not yet fitted
    if section == "mem" and row["gbps"]:
        moved = float(row["gbps"]) * 1e9 * float(row["ms"]) * 1e-3
        if op in ("add", "relu", "copy_", "to_other_dtype"):
            return ("elementwise", dtype, "", ""), moved, 1, "memory"
        if op == "maxpool2d":  # pooling: its backward scatters through the indices
            return ("elementwise", dtype, kernels.POOL, row["pass_"]), moved, 1, "memory"
        return ("norm", dtype, "batch" if op.startswith("batchnorm") else "", row["pass_"]), moved, 1, "memory"
    if section == "optim" and op in OPTIMIZER_BYTES_PER_PARAM:
        tensors, numel = (int(v) for v in re.findall(r"\d+", shape)[:2])
        ops, depth = OPTIMIZER_OPS[op]
        launches = ops * kernels.foreach_launches([numel] * tensors, depth)
        return ("optimizer", dtype, "", ""), OPTIMIZER_BYTES_PER_PARAM[op] * tensors * numel, launches, "memory"
    return None


def _peak(spec: GpuSpec, math_mode: str, bound: str) -> float:
    return spec.memory_bandwidth_gbps * 1e9 if bound == "memory" else spec.peak_tflops(math_mode) * 1e12


def fit(samples: list[tuple[float, float, float]], peak: float) -> Fit:
    """Relative least squares of seconds ≈ a·launches + b·work over (launches, work, seconds), within physics:
    a in [MIN_KERNEL_SECONDS, MAX_LATENCY_SECONDS] (a slower small kernel is host-bound in its benchmark, which
    the host model prices, not the kernel), efficiency 1/(b·peak) at most MAX_EFFICIENCY."""
    def best_a(b: float) -> float:
        return sum((n / t) * (1 - b * w / t) for n, w, t in samples) / sum((n / t) ** 2 for n, _, t in samples)

    def best_b(a: float) -> float:
        return sum((w / t) * (1 - a * n / t) for n, w, t in samples) / sum((w / t) ** 2 for _, w, t in samples)

    s11 = sum((n / t) ** 2 for n, _, t in samples)
    s22 = sum((w / t) ** 2 for _, w, t in samples)
    s12 = sum(n * w / t / t for n, w, t in samples)
    det = s11 * s22 - s12 * s12
    if len(samples) > 1 and det > 1e-9 * s11 * s22:
        r1, r2 = sum(n / t for n, _, t in samples), sum(w / t for _, w, t in samples)
        a, b = (r1 * s22 - r2 * s12) / det, (r2 * s11 - r1 * s12) / det
    else:  # one kernel (or one size): all of it is throughput
        a, b = MIN_KERNEL_SECONDS, best_b(MIN_KERNEL_SECONDS)
    b_min = 1.0 / (peak * MAX_EFFICIENCY)
    if b < b_min:
        b = b_min
        a = best_a(b)
    if not MIN_KERNEL_SECONDS <= a <= MAX_LATENCY_SECONDS:
        a = min(max(a, MIN_KERNEL_SECONDS), MAX_LATENCY_SECONDS)
        b = max(best_b(a), b_min)
    res = [math.log((a * n + b * w) / t) for n, w, t in samples]
    sigma = math.sqrt(sum(r * r for r in res) / len(res)) if len(res) > 2 else UNFITTED_SIGMA
    return Fit(latency=a, efficiency=1.0 / (b * peak), sigma=max(sigma, 0.05), points=len(samples))


NARROW_GRID = (0.0, 16.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0)


def fit_widths(samples: list[tuple[float, float, float, int]], peak: float) -> Fit:
    """fit() over (launches, work, seconds, width), the work of a narrow kernel scaled by its width factor, for
    the `narrow` of NARROW_GRID that leaves the smallest residuals (0 where widths do not explain them)."""
    best: Fit | None = None
    for narrow in NARROW_GRID if any(w for *_, w in samples) else (0.0,):
        f = fit([(n, work * width_factor(narrow, w), t) for n, work, t, w in samples], peak)
        if best is None or f.sigma < best.sigma - 1e-9:
            best = Fit(f.latency, f.efficiency, f.sigma, f.points, narrow)
    assert best is not None
    return best


def rows(catalog_dir: Path | None = None) -> list[dict]:
    out: list[dict] = []
    for path in sorted(_dir(catalog_dir).glob("gpu_kernels*.csv")):
        with open(path, newline="") as f:
            out.extend(csv.DictReader(f))
    return out


def _kernel_row(row: dict, catalog_dir: Path) -> tuple[GpuSpec, tuple[str, str, str, str], float, int, str] | None:
    """(its GPU, fit key, work, launches, bound) of a measured kernel row of a GPU of the table; None otherwise."""
    spec = gpu_spec(row["gpu"], catalog_dir)
    sample = _sample(row) if spec is not None and row.get("ms") else None
    if spec is None or sample is None:
        return None
    key, work, launches, bound = sample
    if key[0] == "rnn" and key[1] == "fp32" and spec.has_tf32:
        key = (key[0], "tf32", *key[2:])  # an 'fp32' LSTM ran as PyTorch runs it: cuDNN in TF32
    return spec, key, work, launches, bound


@lru_cache(maxsize=4)
def _calibrations(catalog_dir: Path) -> dict[str, GpuCalibration]:
    samples: dict[str, dict[tuple, list[tuple[float, float, float, int]]]] = {}
    peaks: dict[tuple[str, tuple], float] = {}
    out: dict[str, GpuCalibration] = {}
    launch_rows: dict[str, list[float]] = {}
    for row in rows(catalog_dir):
        spec = gpu_spec(row["gpu"], catalog_dir)
        if spec is not None and row["section"] == "launch" and row["op"] == "mlp20 step adam":
            out.setdefault(spec.name, GpuCalibration(spec.name)).host_unit_seconds = _host_unit(
                float(row["ms"]) * 1e-3)
        if spec is not None and row["section"] == "host_param" and row.get("ms"):
            out.setdefault(spec.name, GpuCalibration(spec.name)).host_param_seconds[row["op"]] = float(row["ms"]) * 1e-3
            continue
        if spec is not None and row["section"] == "host" and row.get("ms"):
            out.setdefault(spec.name, GpuCalibration(spec.name)).host_op_seconds[
                (row["op"], row["dtype"], row["pass_"])] = float(row["ms"]) * 1e-3
            continue
        kernel = _kernel_row(row, catalog_dir)
        if kernel is None:
            continue
        spec, key, work, launches, bound = kernel
        if launch_bound(row):  # the host's time, not the kernels'
            if (per_launch := _rnn_launch_seconds(row)) is not None:
                launch_rows.setdefault(spec.name, []).append(per_launch)
            continue
        out.setdefault(spec.name, GpuCalibration(spec.name)).sources.add(row.get("source", ""))
        samples.setdefault(spec.name, {}).setdefault(key, []).append(
            (launches, work, _kernel_seconds(float(row["ms"])), row_width(row)))
        peaks[(spec.name, key)] = _peak(spec, key[1], bound)
    for gpu, by_key in samples.items():
        out[gpu].fits = {k: fit_widths(v, peaks[(gpu, k)]) for k, v in by_key.items()}
    for gpu, per_launch in launch_rows.items():
        out[gpu].rnn_launch_seconds = sorted(per_launch)[len(per_launch) // 2]
    return out


def launch_bound(row: dict) -> bool:
    """An 'lstm' row narrow enough that its host's launches of every time step's kernels set its time, not the GPU."""
    m = _LSTM.fullmatch(row["shape"]) if row["section"] == "lstm" else None
    return bool(m) and int(m.group(3)) <= RNN_LAUNCH_BOUND_HIDDEN


def _rnn_launch_seconds(row: dict) -> float | None:
    """Seconds per recorded launch (3 a time step and layer: forward, backward's two) of a launch-bound 'lstm' row
    long enough (256 steps × layers) that its fixed start does not count; None otherwise."""
    m = _LSTM.fullmatch(row["shape"]) if launch_bound(row) else None
    if not m:
        return None
    _, s, _, layers = (int(v) for v in m.groups())
    return float(row["ms"]) * 1e-3 / (3 * s * layers) if s * layers >= 256 else None


def calibrations(catalog_dir: Path | None = None) -> dict[str, GpuCalibration]:
    return _calibrations(_dir(catalog_dir))


def host_unit_seconds(cal: GpuCalibration) -> float:
    """One forward op's host dispatch: the calibration's (calibration_for gives a measured GPU's host to a GPU
    without one), else a prior."""
    return cal.host_unit_seconds or DEFAULT_HOST_UNIT_SECONDS


def pooled_fit(fits: list[Fit]) -> Fit:
    """A class a GPU has not measured: the geometric mean of other GPUs' latencies and efficiencies (each a share
    of its own GPU's peak), their median narrow width, the borrowing's error added to their sigma."""
    n = len(fits)
    latency = math.exp(sum(math.log(f.latency) for f in fits) / n)
    efficiency = math.exp(sum(math.log(f.efficiency) for f in fits) / n)
    sigma = math.exp(sum(math.log(f.sigma) for f in fits) / n)
    narrow = sorted(f.narrow for f in fits)[n // 2]
    return Fit(latency, efficiency, math.hypot(sigma, BORROWED_SIGMA), sum(f.points for f in fits), narrow)


def pool_of(key: tuple, fits_by_gpu: dict[str, dict[tuple, Fit]]) -> Fit | None:
    """The pooled fit of class `key` over the GPUs (name -> fits) that measured it; None where none did."""
    having = [fits[key] for fits in fits_by_gpu.values() if key in fits]
    return pooled_fit(having) if having else None


def calibration_for(spec: GpuSpec, catalog_dir: Path | None = None) -> tuple[GpuCalibration, str]:
    """(the fits to price `spec` with, where they come from in words): its own measured fits, and for each
    class it lacks, the pooled fit of every measured GPU that has it (pooled_fit)."""
    return _merged(spec.name, _dir(catalog_dir))


@lru_cache(maxsize=64)
def _merged(name: str, catalog_dir: Path) -> tuple[GpuCalibration, str]:
    cals = _calibrations(catalog_dir)
    spec = gpu_spec(name, catalog_dir)
    assert spec is not None
    own = cals.get(spec.name, GpuCalibration(spec.name))
    donors = [cals[g] for g in sorted(cals) if g != spec.name]
    merged = GpuCalibration(spec.name, fits=dict(own.fits), sources=own.sources)
    lenders: set[str] = set()
    donor_fits = {d.gpu: d.fits for d in donors}
    for key in sorted({k for d in donors for k in d.fits} - set(own.fits)):
        if (pooled := pool_of(key, donor_fits)) is not None:
            merged.fits[key] = pooled
            lenders.update(g for g, fits in donor_fits.items() if key in fits)
    # the host is a CPU, not the GPU: a GPU without its own host measurement takes another GPU's
    hosts = [c for c in [own, *donors] if c.host_unit_seconds or c.host_op_seconds]
    merged.host_unit_seconds = next((c.host_unit_seconds for c in hosts if c.host_unit_seconds), None)
    merged.host_op_seconds = next((c.host_op_seconds for c in hosts if c.host_op_seconds), {})
    merged.rnn_launch_seconds = next((c.rnn_launch_seconds for c in [own, *donors] if c.rnn_launch_seconds), None)
    merged.host_param_seconds = next((c.host_param_seconds for c in hosts if c.host_param_seconds), {})
    named = ", ".join(sorted(lenders)) if len(lenders) <= 3 else f"{len(lenders)} measured GPUs"
    if not own.fits:
        basis = f"no kernels measured on the {spec.name}: the pooled fits of {named}"
    elif lenders:
        basis = f"calibrated on the {spec.name} (classes it lacks pooled from {named})"
    else:
        basis = f"calibrated on the {spec.name}"
    return merged, basis


def transfer_errors(catalog_dir: Path | None = None, lend=None) -> dict[tuple[str, str], list[float]]:
    """How well fits travel between GPUs: each measured GPU's kernels predicted, as for a GPU without rows, from
    the other GPUs' fits alone (`lend(gpu spec, class key, {gpu: its fits}) -> Fit | None`, default: pool_of
    them). (gpu, kind) -> log(predicted / measured) per kernel."""
    cat = _dir(catalog_dir)
    cals = _calibrations(cat)
    out: dict[tuple[str, str], list[float]] = {}
    others: dict[str, dict[str, dict[tuple, Fit]]] = {}
    for row in rows(cat):
        kernel = _kernel_row(row, cat)
        if kernel is None or kernel[0].name not in cals:
            continue
        spec, key, work, launches, bound = kernel
        if spec.name not in others:
            others[spec.name] = {g: c.fits for g, c in cals.items() if g != spec.name}
        fit_ = pool_of(key, others[spec.name]) if lend is None else lend(spec, key, others[spec.name])
        if fit_ is not None:
            predicted = fit_.seconds(work, launches, _peak(spec, key[1], bound), row_width(row))
            out.setdefault((spec.name, key[0]), []).append(math.log(predicted / _kernel_seconds(float(row["ms"]))))
    return out
