"""Where a measured training step's time goes, by the estimator's kernel classes, beside its prediction.

orchestrator/estimate/kernel_times.py sums a profiled step's self device time per kernel class as the recorder
classes ops for the prediction, so measured and predicted seconds line up per class. The rows also carry the
step's wall time against the GPU's busy time (a step much longer than its kernels is bound by the host), and the
ops that took the most GPU time with their input shapes: what one run on a lent GPU must leave behind to correct
the model afterwards.
Without CUDA the same accounting runs on the ops' CPU self time (how the tests check it).
"""
from __future__ import annotations

import csv
from pathlib import Path

from orchestrator.estimate import kernel_times, kernels

COLUMNS = ["model", "row", "name", "calls_per_step", "measured_ms", "predicted_ms", "detail"]


def top_ops(events, device: bool, steps: int = 1, n: int = 15) -> list[dict]:
    """The n aten ops (by name and input shapes) with the most self time per step."""
    rows = []
    for e in events:
        if kernel_times.is_kernel_row(e) or kernel_times.kind_of_event(e.key) is None:
            continue
        us = kernel_times.self_microseconds(e, device)
        if us > 0:
            rows.append(dict(name=e.key, calls_per_step=e.count / steps, measured_ms=us * 1e-3 / steps,
                             detail=str(getattr(e, "input_shapes", "") or "")[:200]))
    return sorted(rows, key=lambda r: -r["measured_ms"])[:n]


def profile_step(step, steps: int = 3):
    """(events grouped by op and input shapes, events by op, whether device times were recorded)."""
    prof, device = kernel_times.profile_steps(step, steps, shapes=True)
    return prof.key_averages(group_by_input_shape=True), prof.key_averages(), device


def breakdown_rows(model: str, step, measured_s: float, predicted, steps: int = 3) -> list[dict]:
    """The rows for one model: per class measured vs predicted ms, the step's wall and busy time, top ops.
    `predicted` is gpu_time.StepTime."""
    by_shape, by_op, device = profile_step(step, steps)
    measured = kernel_times.time_by_kind(by_op, device, steps)
    rows = [dict(model=model, row="total", name="step wall", measured_ms=measured_s * 1e3,
                 predicted_ms=predicted.seconds * 1e3),
            dict(model=model, row="total", name="gpu busy" if device else "cpu ops",
                 measured_ms=sum(measured.values()) * 1e3,
                 predicted_ms=predicted.gpu_seconds * 1e3),
            dict(model=model, row="total", name="host dispatch (predicted)", predicted_ms=predicted.host_seconds * 1e3)]
    for kind in sorted(set(measured) | set(predicted.by_kind)):
        rows.append(dict(model=model, row="kind", name=kind, measured_ms=measured.get(kind, 0.0) * 1e3,
                         predicted_ms=predicted.by_kind.get(kind, 0.0) * 1e3))
    rows += [dict(model=model, row="op", **r) for r in top_ops(by_shape, device, steps)]
    return rows


# ops a breakdown recorded before 2026-11-28 counted as elementwise (kernels.kind_of did not know them): cuDNN's
# RNN, cuDNN's fused attention, PyTorch's depthwise convolution
CLASSED_SINCE_2026_11_28 = kernels.RNN_OPS | {"_cudnn_attention_forward", "_cudnn_attention_backward",
                                              "_conv_depthwise2d"}


def recorded_classes(path: Path) -> dict[str, dict[str, float]]:
    """model -> kernel class -> measured ms per step from a recorded breakdown.csv, with the time of the ops today's
    classifier puts elsewhere (its top ops: where the big ones are) moved out of 'elementwise'."""
    out: dict[str, dict[str, float]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            kinds = out.setdefault(r["model"], {})
            if r["row"] == "kind" and r["measured_ms"]:
                kinds[r["name"]] = kinds.get(r["name"], 0.0) + float(r["measured_ms"])
            elif r["row"] == "op" and r["name"].removeprefix("aten::") in CLASSED_SINCE_2026_11_28:
                kind, ms = kernel_times.kind_of_event(r["name"]) or "other", float(r["measured_ms"])
                kinds["elementwise"] = kinds.get("elementwise", 0.0) - ms
                kinds[kind] = kinds.get(kind, 0.0) + ms
    return out


def write(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: (f"{r[c]:.4g}" if isinstance(r.get(c), float) else r.get(c, "")) for c in COLUMNS})
