"""The host side of the suite's training steps on this GPU machine (needs CUDA): what bench/host_fit.py reads.

Per loop of bench/estimator_gpu.py's SUITE (the same plain loop it times): the step's wall time, the time until every
op of the step is dispatched (before `loss.item()`), that part's thread CPU time (median of 15 steps after 5
warm-ups), then one step under torch.profiler (CPU only): the summed self CPU time and event count, and per op the
40 largest self CPU times with their call counts. Writes DIR/host_steps.csv and DIR/host_ops.csv.

    python bench/host_steps.py --out DIR [--budget-seconds 60]
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def timed_parts(workload):
    """One step of the suite's loop as a callable returning (wall, dispatched, dispatch thread CPU) seconds."""
    import torch

    from orchestrator.estimate.profile import build_model, loss_of, make_batch

    tf32, memory_format, impl = workload.math
    torch.backends.cuda.matmul.allow_tf32 = tf32
    model = build_model(workload, "cuda").train()
    x, y = make_batch(workload, "cpu")
    if memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
    x, y = x.pin_memory(), y.pin_memory()
    opt = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}.get(workload.optimizer, torch.optim.SGD)(
        model.parameters(), lr=1e-3, **({"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}))
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(workload.precision)
    scaler = torch.amp.GradScaler("cuda", enabled=workload.precision == "fp16")

    def step():
        t0, c0 = time.perf_counter(), time.thread_time()
        xb, yb = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
            loss = loss_of(model(xb), yb, workload.num_classes)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        t1, c1 = time.perf_counter(), time.thread_time()
        loss.item()
        return time.perf_counter() - t0, t1 - t0, c1 - c0

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-seconds", type=float, default=60)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    from estimator_gpu import SUITE

    from orchestrator.estimate.workload import Workload

    args.out.mkdir(parents=True, exist_ok=True)
    steps_rows, op_rows = [], []
    started = time.perf_counter()
    for name, seen, fields in SUITE:
        if time.perf_counter() - started > args.budget_seconds:
            break
        try:
            step = timed_parts(Workload(**fields))
            for _ in range(5):
                step()
            torch.cuda.synchronize()
            r = [step() for _ in range(15)]
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step()
        except torch.cuda.OutOfMemoryError:
            continue
        events = prof.key_averages()
        steps_rows.append(dict(model=name, set="seen" if seen else "held out",
                               wall_ms=round(statistics.median(a for a, _, _ in r) * 1e3, 3),
                               dispatched_ms=round(statistics.median(b for _, b, _ in r) * 1e3, 3),
                               dispatch_thread_cpu_ms=round(statistics.median(c for _, _, c in r) * 1e3, 3),
                               profiled_self_cpu_ms=round(sum(e.self_cpu_time_total for e in events) / 1e3, 3),
                               profiled_events=sum(e.count for e in events)))
        for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:40]:
            op_rows.append(dict(model=name, op=e.key, count=e.count, self_cpu_us=round(e.self_cpu_time_total, 1)))
        del step
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.empty_cache()
        for file, rows in (("host_steps.csv", steps_rows), ("host_ops.csv", op_rows)):
            with open(args.out / file, "w", newline="") as f:  # after each loop: a timeout keeps the rest
                w = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
                w.writeheader()
                w.writerows(rows)
        print(f"{name}: {steps_rows[-1]}", flush=True)


if __name__ == "__main__":
    main()
