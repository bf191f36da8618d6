"""Where a measured training step's time goes, by the estimator's kernel classes, beside its prediction.

torch.profiler gives each aten op its self device time: the kernels it launched itself, not those of the ops it
called. kernels.kind_of names each op's class as the recorder does for the prediction, so measured and predicted
seconds line up per class (conv, norm, elementwise, ...). The rows also carry the step's wall time against the
GPU's busy time (a step much longer than its kernels is bound by the host), and the ops that took the most GPU
time with their input shapes: what one run on a lent GPU must leave behind to correct the model afterwards.
Without CUDA the same accounting runs on the ops' CPU self time (how the tests check it).
"""
from __future__ import annotations

import csv
from pathlib import Path

COLUMNS = ["model", "row", "name", "calls_per_step", "measured_ms", "predicted_ms", "detail"]
OTHER = "other"  # kernels outside any aten op (none expected) or time of non-aten labels


def kind_of_event(name: str) -> str | None:
    """The estimator's class of a profiler event's op; None for what is not an aten op (Python, autograd
    labels: their self time is the host's, not a kernel's)."""
    from orchestrator.planning import kernels

    if not name.startswith("aten::"):
        return None
    op = name.removeprefix("aten::")
    return "host" if op in kernels.FREE_OPS else kernels.kind_of(op)


def _self_us(event, device: bool) -> float:
    if device:
        return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0))
    return float(event.self_cpu_time_total)


def time_by_kind(events, device: bool, steps: int = 1) -> dict[str, float]:
    """Seconds per step of each kernel class, from a profile's averaged op events (`prof.key_averages()`)."""
    out: dict[str, float] = {}
    for e in events:
        if str(getattr(e, "device_type", "DeviceType.CPU")).endswith("CUDA"):
            continue  # the kernels' own rows: their time is already their launching op's self device time
        kind = kind_of_event(e.key)
        us = _self_us(e, device)
        if kind is None:
            kind = OTHER if device else None
        if kind is not None and us > 0:
            out[kind] = out.get(kind, 0.0) + us * 1e-6 / steps
    return out


def top_ops(events, device: bool, steps: int = 1, n: int = 15) -> list[dict]:
    """The n aten ops (by name and input shapes) with the most self time per step."""
    rows = []
    for e in events:
        if kind_of_event(e.key) is None or str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue
        us = _self_us(e, device)
        if us > 0:
            rows.append(dict(name=e.key, calls_per_step=e.count / steps, measured_ms=us * 1e-3 / steps,
                             detail=str(getattr(e, "input_shapes", "") or "")[:200]))
    return sorted(rows, key=lambda r: -r["measured_ms"])[:n]


def profile_step(step, steps: int = 3):
    """`steps` calls of step() under torch.profiler (CUDA activity where there is a GPU): (events grouped by op
    and input shapes, events by op, whether device times were recorded)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    return prof.key_averages(group_by_input_shape=True), prof.key_averages(), cuda


def breakdown_rows(model: str, step, measured_s: float, predicted, steps: int = 3) -> list[dict]:
    """The rows for one model: per class measured vs predicted ms, the step's wall and busy time, top ops.
    `predicted` is gpu_time.StepTime."""
    by_shape, by_op, device = profile_step(step, steps)
    measured = time_by_kind(by_op, device, steps)
    rows = [dict(model=model, row="total", name="step wall", measured_ms=measured_s * 1e3,
                 predicted_ms=predicted.seconds * 1e3),
            dict(model=model, row="total", name="gpu busy" if device else "cpu ops",
                 measured_ms=sum(v for k, v in measured.items() if k != OTHER) * 1e3,
                 predicted_ms=predicted.gpu_seconds * 1e3),
            dict(model=model, row="total", name="host dispatch (predicted)", predicted_ms=predicted.host_seconds * 1e3)]
    for kind in sorted(set(measured) | set(predicted.by_kind)):
        rows.append(dict(model=model, row="kind", name=kind, measured_ms=measured.get(kind, 0.0) * 1e3,
                         predicted_ms=predicted.by_kind.get(kind, 0.0) * 1e3))
    rows += [dict(model=model, row="op", **r) for r in top_ops(by_shape, device, steps)]
    return rows


def write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: (f"{r[c]:.4g}" if isinstance(r.get(c), float) else r.get(c, "")) for c in COLUMNS})
