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
    from estimator_gpu import plain_step

    run = plain_step(workload)

    def step():
        t0, c0 = time.perf_counter(), time.thread_time()
        marks: list[tuple[float, float]] = []
        run(lambda: marks.append((time.perf_counter(), time.thread_time())))
        t1, c1 = marks[0]
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
