"""Seconds of one training step on a GPU: each kernel of the profile priced by its class's calibration.

A kernel takes the longer of its FLOPs at the peak of the math mode PyTorch picks on that GPU × the class's
efficiency at that kernel's size (gpu_calibration.py), and its bytes at the memory bandwidth × the measured
bandwidth efficiency. cuDNN's RNN adds a latency per time step. The host dispatches ops while the GPU runs
them: a step is bound by the slower of the two (a sync, as GradScaler's, splits the step in two), plus the
batch's host-to-device copy and, across GPUs, the gradient all-reduce.

The math mode is PyTorch's default unless the job says otherwise: fp32 convolutions and cuDNN RNNs run as TF32
on Ampere and later (torch.backends.cudnn.allow_tf32 is True), fp32 matmuls in full fp32 (allow_tf32 False)
unless `workload.tf32`; under autocast the half-precision ops run at the fp16/bf16 tensor peak.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from infra.catalog import GpuSpec
from orchestrator.estimate import kernels
from orchestrator.estimate.step_ops import SYNC_OP
from orchestrator.estimate.gpu_calibration import MIN_KERNEL_SECONDS, Fit, GpuCalibration, calibration_for
from orchestrator.estimate.host_time import REFERENCE_HOST, HostCpu, host_seconds, host_sigma, overlapped

SYNC_SECONDS = 15e-6  # the host waiting on the GPU and starting again
INTER_NODE_GBPS = 3.0  # effective all-reduce bandwidth between cloud nodes (GB/s)
# what the microbenchmarks cannot see (data-dependent kernels, allocator, framework overhead): log-sigma
MODEL_SIGMA = 0.10


@dataclass(frozen=True)
class StepTime:
    seconds: float
    sigma: float  # log-error at one sigma
    gpu_seconds: float
    host_seconds: float
    by_kind: dict[str, float]
    basis: str  # where the calibration comes from, in words


def math_mode(kind: str, dtype: str, gpu: GpuSpec, tf32_matmul: bool, layout: str = "") -> str:
    """The math the GPU runs for a kernel: PyTorch's defaults, per kernel class. A depthwise convolution in NCHW runs
    on the CUDA cores whatever its dtype (kernels.on_cuda_cores). Fused attention on fp32
    tensors is the memory-efficient kernel's fp32 path whatever the TF32 setting (flash and cuDNN attention take only
    half precision): the H200's fp32 SDPA rows, not its TF32 GEMMs."""
    if kind == "conv" and kernels.on_cuda_cores(layout):
        return "fp32"
    if dtype in ("bf16", "fp16"):
        return dtype if gpu.peak_tflops(dtype) > gpu.fp32_tflops else "fp32"
    if not gpu.has_tf32:
        return "fp32"
    if kind in ("conv", "rnn"):
        return "tf32"  # cudnn.allow_tf32 defaults to True
    return "tf32" if tf32_matmul and kind == "gemm" else "fp32"


def _find_fit(cal: GpuCalibration, kind: str, mode: str, layout: str, pass_: str) -> Fit | None:
    """The fit for a kernel, else the nearest of the same math mode (another layout or pass, then GEMM's for a
    compute class, elementwise's for a memory class), and only then another math mode's."""
    fits = cal.fits
    base = layout.split("/")[0]
    for key in ((kind, mode, layout, pass_), (kind, mode, base, pass_), (kind, mode, "nchw", pass_),
                (kind, mode, "", pass_), (kind, mode, "", "")):
        if key in fits:
            return fits[key]
    fallback = "gemm" if kind in kernels.COMPUTE_KINDS else "elementwise"
    for wanted in ((kind, mode), (fallback, mode), (kind, None), (fallback, None)):
        keys = sorted(k for k in fits if k[0] == wanted[0] and wanted[1] in (None, k[1]) and not k[2].endswith("<8"))
        if keys:
            return fits[min(keys, key=lambda k: (k[2] != base, k[3] != pass_))]
    return None


def _memory_efficiency(cal: GpuCalibration) -> float:
    fit = _find_fit(cal, "elementwise", "fp32", "", "")
    return fit.efficiency if fit else 0.85


def kernel_seconds(op, gpu: GpuSpec, cal: GpuCalibration, tf32_matmul: bool, split: int = 1) -> tuple[float, float]:
    """(seconds of all `op.count` calls of one OpCost on `gpu`, their log-sigma); `split` GPUs share the batch."""
    kind = op.kind or ("gemm" if op.flops > 0 else "elementwise")
    if kind == "host":
        return 0.0, 0.0
    share = 1 if op.phase == "optimizer" else split  # data parallel: every GPU steps the whole optimizer
    flops, moved, launches = op.flops / share, op.bytes / share, op.kernel_launches
    mode = math_mode(kind, op.dtype or "fp32", gpu, tf32_matmul, op.layout)
    memory_s = moved / (gpu.memory_bandwidth_gbps * 1e9 * _memory_efficiency(cal))
    pass_ = "bwd" if op.name.endswith("_backward") or op.phase == "backward" else "fwd"
    fit = _find_fit(cal, kind, mode, op.layout, pass_ if kind in ("conv", "norm") or op.layout == kernels.POOL else "")
    if fit is None:
        return max(memory_s, launches * MIN_KERNEL_SECONDS), 0.3
    if kind in kernels.COMPUTE_KINDS and flops > 0:
        return max(fit.seconds(flops, launches, gpu.peak_tflops(mode) * 1e12, op.width), memory_s), fit.sigma
    return fit.seconds(moved, launches, gpu.memory_bandwidth_gbps * 1e9, op.width), fit.sigma


def gpu_step(profile, gpu: GpuSpec, gpus_per_node: int = 1, num_nodes: int = 1,
             host: HostCpu = REFERENCE_HOST) -> StepTime:
    n = max(1, gpus_per_node * num_nodes)
    cal, basis = calibration_for(gpu)
    tf32 = bool(getattr(profile, "tf32", False))
    has_sync = any(o.name == SYNC_OP for o in profile.ops)
    gpu_before = gpu_after = 0.0
    by_kind: dict[str, float] = {}
    var = 0.0
    for op in profile.ops:
        seconds, sigma = kernel_seconds(op, gpu, cal, tf32, n)
        if has_sync and op.phase == "optimizer":
            gpu_after += seconds
        else:
            gpu_before += seconds
        kind = op.kind or ("gemm" if op.flops > 0 else "elementwise")
        by_kind[kind] = by_kind.get(kind, 0.0) + seconds
        var += (seconds * sigma) ** 2
    host_before, host_after = host_seconds(profile, cal, host)
    step = overlapped(host_before, gpu_before) + (overlapped(host_after, gpu_after) + SYNC_SECONDS if has_sync else 0.0)
    step += SYNC_SECONDS + profile.batch_input_bytes / n / (gpu.host_link_gbps * 1e9)
    if n > 1:  # ring all-reduce of the gradients
        link = INTER_NODE_GBPS if num_nodes > 1 else gpu.host_link_gbps
        step += 2 * (n - 1) / n * profile.grad_bytes / (link * 1e9)
    gpu_total = gpu_before + gpu_after
    kernel_sigma = math.sqrt(var) / gpu_total if gpu_total > 0 else 0.0
    host_total = host_before + host_after
    if host_total > gpu_total:  # the host sets the pace: its sigma, weighted by how far ahead it is
        kernel_sigma = max(kernel_sigma, host_sigma(host) * min(1.0, (host_total - gpu_total) / gpu_total * 2)
                           if gpu_total > 0 else host_sigma(host))
    sigma = math.sqrt(kernel_sigma ** 2 + MODEL_SIGMA ** 2)
    basis += f"; host CPU: {host.name}" + (" (host-bound)" if host_total > gpu_total else "")
    return StepTime(seconds=step, sigma=sigma, gpu_seconds=gpu_total, host_seconds=host_total,
                    by_kind=by_kind, basis=basis)
