"""The host model's constants (orchestrator/estimate/host_time.py) derived from a device run's host measurements.

Reads a run's host_steps.csv (per suite loop: step wall, time until every op is dispatched), host_ops.csv (one
profiled step's self CPU per op) and breakdown.csv (GPU busy), records each loop's ops here (no GPU needed), and
derives from the suite's *seen* loops only:
- PER_PARAM_SECONDS, OPTIMIZER_STEP_SECONDS: a least-squares line of the optimizer's, zero_grad's, AccumulateGrad's
  and item()'s self CPU (deflated by the loop's dispatch over its profiled self CPU: the profiler's own cost)
  against the number of parameter tensors;
- REAL_STEP_FACTOR: the geometric mean of dispatched / the host model's sum (before the factor) over the loops where
  nothing blocks the host (no cuDNN RNN, no GradScaler sync);
- RNN_STEP_FACTOR: the same for cuDNN RNN launches, from the seen loops with an RNN (their dispatch less the rest of
  their host time, over their launches priced from the launch-bound 'lstm' rows);
- OVERLAP_P: the p of the smooth maximum (host^p + GPU^p)^(1/p) that best fits step wall against (dispatched, busy).
Then it prints, for seen and held-out loops alike, the measured dispatch against the model's host time with the
constants in host_time.py now, so a held-out loop's error is what the constants really miss.

    python bench/host_fit.py [DIR]      (default ../shared/calibration/h200_device_run_2026-11-28)
"""
from __future__ import annotations

import csv
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

PER_PARAM_OPS = ("Optimizer.step#", "Optimizer.zero_grad#", "autograd::engine::evaluate_function: torch::autograd::"
                 "AccumulateGrad", "torch::autograd::AccumulateGrad", "aten::item", "aten::_local_scalar_dense")


def _read(run: Path, name: str) -> list[dict]:
    with open(run / name, newline="") as f:
        return list(csv.DictReader(f))


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return slope, my - slope * mx


def _gm_error(ratios: list[float]) -> float:
    return math.exp(statistics.mean(abs(math.log(r)) for r in ratios)) if ratios else float("nan")


def main() -> None:
    run = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared/calibration/h200_device_run_2026-11-28")
    from estimator_gpu import SUITE

    from infra.catalog import gpu_spec
    from orchestrator.estimate import host_time
    from orchestrator.estimate.gpu_calibration import calibration_for
    from orchestrator.estimate.gpu_time import gpu_step
    from orchestrator.estimate.profile import profile_now
    from orchestrator.estimate.step_ops import SYNC_OP
    from orchestrator.estimate.workload import Workload

    steps = {r["model"]: r for r in _read(run, "host_steps.csv")}
    busy = {r["model"]: float(r["measured_ms"]) * 1e-3 for r in _read(run, "breakdown.csv")
            if r["row"] == "total" and r["name"] == "gpu busy"}
    per_param_us: dict[str, float] = {}
    for r in _read(run, "host_ops.csv"):
        if r["op"].startswith(PER_PARAM_OPS):
            per_param_us[r["model"]] = per_param_us.get(r["model"], 0.0) + float(r["self_cpu_us"])
    spec = gpu_spec("H200")
    assert spec is not None
    cal, _ = calibration_for(spec)
    loops = []
    for name, seen, fields in SUITE:
        if name not in steps:
            continue
        p = profile_now(Workload(**fields), measure_local=False)
        before, after = host_time.host_seconds(p, cal)
        blocked = any(o.kind == "rnn" for o in p.ops) or any(o.name == SYNC_OP for o in p.ops)
        rnn = sum(host_time.op_host_seconds(o, cal, False) for o in p.ops if o.kind == "rnn")
        loops.append(dict(name=name, seen=seen, profile=p, host=before + after, blocked=blocked, rnn=rnn,
                          dispatched=float(steps[name]["dispatched_ms"]) * 1e-3,
                          wall=float(steps[name]["wall_ms"]) * 1e-3, busy=busy.get(name, 0.0),
                          gpu=gpu_step(p, spec).gpu_seconds))
    seen = [lp for lp in loops if lp["seen"]]

    with_ops = [lp for lp in seen if lp["name"] in per_param_us]
    # the profiler's own cost inflates what it records: each loop's self CPU deflated to its unprofiled dispatch
    deflate = {n: float(r["dispatched_ms"]) / float(r["profiled_self_cpu_ms"]) for n, r in steps.items()}
    slope, intercept = _line([lp["profile"].param_tensors for lp in with_ops],
                             [per_param_us[lp["name"]] * 1e-6 * deflate[lp["name"]] for lp in with_ops])
    print(f"PER_PARAM_SECONDS = {slope * 1e6:.1f}e-6, OPTIMIZER_STEP_SECONDS = {intercept * 1e3:.2f}e-3 "
          f"(seen loops {len(with_ops)}: {', '.join(lp['name'] for lp in with_ops)})")
    free = [lp for lp in seen if not lp["blocked"]]
    factor = math.exp(statistics.mean(math.log(lp["dispatched"] / (lp["host"] / host_time.REAL_STEP_FACTOR))
                                      for lp in free))
    print(f"REAL_STEP_FACTOR = {factor:.2f} (seen loops nothing blocks: {', '.join(lp['name'] for lp in free)})")
    rnn_loops = [lp for lp in seen if lp["rnn"] > 0]
    if rnn_loops:
        rnn_factor = math.exp(statistics.mean(
            math.log((lp["dispatched"] - (lp["host"] - lp["rnn"])) / (lp["rnn"] / host_time.RNN_STEP_FACTOR))
            for lp in rnn_loops))
        print(f"RNN_STEP_FACTOR = {rnn_factor:.2f} (seen loops with cuDNN RNNs: "
              f"{', '.join(lp['name'] for lp in rnn_loops)})")
    both = [lp for lp in seen if lp["busy"] > 0]

    def p_error(p: float) -> float:
        return sum(math.log((lp["dispatched"] ** p + lp["busy"] ** p) ** (1 / p) / lp["wall"]) ** 2 for lp in both)

    best_p = min((1.5 + 0.5 * i for i in range(18)), key=p_error)
    print(f"OVERLAP_P = {best_p:.1f} (step wall against dispatch and GPU busy, seen loops {len(both)})")
    print(f"\nwith host_time.py's constants now (factor {host_time.REAL_STEP_FACTOR}, p {host_time.OVERLAP_P}):")
    print(f"{'loop':34s} {'set':9s} {'dispatched':>10s} {'host model':>10s} {'ratio':>6s}  "
          f"{'wall':>8s} {'overlap(measured)':>17s}")
    ratios: dict[bool, list[float]] = {True: [], False: []}
    for lp in loops:
        ratio = lp["host"] / lp["dispatched"]
        if not lp["blocked"]:
            ratios[lp["seen"]].append(ratio)
        both_ms = host_time.overlapped(lp["dispatched"], lp["busy"]) * 1e3
        print(f"{lp['name']:34s} {'seen' if lp['seen'] else 'held out':9s} {lp['dispatched'] * 1e3:9.1f}  "
              f"{lp['host'] * 1e3:9.1f}  {ratio:6.2f}  {lp['wall'] * 1e3:7.1f}  {both_ms:16.1f}"
              + ("  (blocked: RNN launches or GradScaler's sync)" if lp["blocked"] else ""))
    for s, rs in ratios.items():
        print(f"host model vs dispatched, {'seen' if s else 'held out'} (not blocked): {len(rs)} loops, "
              f"geometric-mean error x{_gm_error(rs):.2f}")


if __name__ == "__main__":
    main()
