"""Where a real training step's GPU time goes, per kernel class, as torch.profiler measures it.

The profiler gives each aten op its self device time (the kernels it launched itself, not those of the ops it
called); kernels.kind_of names the op's class as the op recorder does for the prediction, so measured and
predicted seconds line up per class. The GPU here uses it to scale each class on its own to other GPUs
(estimator.py); bench/gpu_breakdown.py to show a measured step beside its prediction. On a CPU the same
accounting reads the ops' CPU self time.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager

from orchestrator.estimate import kernels


def kind_of_event(name: str) -> str | None:
    """The estimator's class of a profiler event's op; None for what is not an aten op (Python and autograd
    labels: their self time is the host's, not a kernel's)."""
    if not name.startswith("aten::"):
        return None
    op = name.removeprefix("aten::")
    return "host" if op in kernels.FREE_OPS else kernels.kind_of(op)


def is_kernel_row(event) -> bool:
    """A device-side row (a kernel itself): its time is already its launching op's self device time."""
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def self_microseconds(event, device: bool) -> float:
    if device:
        return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0))
    return float(event.self_cpu_time_total)


def time_by_kind(events, device: bool, steps: int = 1) -> dict[str, float]:
    """Seconds per step of each kernel class, from a profile's averaged op events (`prof.key_averages()`);
    on a GPU, time in kernels no aten op launched is under "other"."""
    out: dict[str, float] = {}
    for e in events:
        if is_kernel_row(e):
            continue
        kind = kind_of_event(e.key)
        if kind is None:
            kind = "other" if device else None
        us = self_microseconds(e, device)
        if kind is not None and us > 0:
            out[kind] = out.get(kind, 0.0) + us * 1e-6 / steps
    return out


def step_time_by_kind(step, steps: int = 3) -> dict[str, float]:
    """Seconds per step by kernel class over `steps` calls of step() (warmed up by the caller)."""
    prof, on_device = profile_steps(step, steps)
    return time_by_kind(prof.key_averages(), on_device, steps)


def profile_steps(step, steps: int = 3, shapes: bool = False):
    """`steps` calls of step() under torch.profiler, with CUDA activity where there is a GPU: (the profiler, for
    its `key_averages()`; whether it recorded device times). `shapes`: record the ops' input shapes too."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with _stderr_silenced(), profile(activities=activities, record_shapes=shapes) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    return prof, cuda


@contextmanager
def _stderr_silenced():
    """The profiler's library writes 'USDT: ... profiler_start' lines straight to file descriptor 2, whatever
    KINETO_LOG_LEVEL says: not for a user's `dlrun plan` screen."""
    sys.stderr.flush()
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
