"""Spot with dlrun's recovery vs on-demand: a month of nightly jobs simulated against a preemption trace.

    python bench/spot_savings.py [--rate 0.1] [--duration 10] [--job-hours 3] [--checkpoint-minutes 30]
                                 [--deadline-hours 8] [--gpu T4] [--seed 0] [--nights 30]

Prices: the catalog's single-GPU offers of --gpu (infra.catalog.load_offers). The on-demand
baseline runs every night on the offer the planner would pick on-demand (the cheapest start-up + job),
never preempted. The spot run follows the runner's recovery policy (runner.execute): the cheapest
candidate of either market is launched; a preemption blocks that offer (both markets, as the runner's
blocked key does) and re-plans; after JobSpec.max_preemptions preemptions it re-plans on-demand only.
The job resumes from its last checkpoint (written every --checkpoint-minutes of progress), so only
the work since then is lost; each launch pays the estimator's start-up time for its cloud
(estimator.STARTUP_SECONDS, billed: the instance runs while it boots and installs), and each
preemption is followed by an unbilled outage (exponential, mean --duration minutes: detection,
capacity coming back). Preemptions are a Poisson process of --rate per spot-instance-hour.
A night whose job has not finished --deadline-hours after it started is stopped there (its cost so far
counts) and is not completed; the next night starts fresh, as scheduled runs do.

Every rate in the table reuses the same random numbers (inter-arrival times are unit exponentials
divided by the rate), so the rows differ only by the rate. Deterministic for a given --seed.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TABLE_RATES = (0.0, 0.05, 0.1, 0.3, 1.0)


@dataclass
class Night:
    cost: float
    hours: float  # wall-clock from the night's start to finish (or to the deadline)
    completed: bool
    preemptions: int
    on_demand_fallback: bool
    lost_hours: float  # work redone after preemptions


def offers_for(gpu: str):
    from infra.catalog import canonical_gpu, load_offers

    name = canonical_gpu(gpu)
    if name is None:
        sys.exit(f"--gpu {gpu}: not in the catalog (configs/catalog/gpus.csv)")
    offers = [o for o in load_offers() if o.accelerator == name and o.accelerator_count == 1]
    if not offers:
        sys.exit(f"--gpu {gpu}: the catalog has no single-GPU offer of {name}")
    if not any(o.spot_price_per_hour is not None for o in offers):
        sys.exit(f"--gpu {gpu}: no offer of {name} has a spot price")
    return name, offers


def startup_hours(offer) -> float:
    from orchestrator.estimate.estimator import cluster_start_seconds

    return cluster_start_seconds(offer.cloud) / 3600.0


def choose(offers, blocked: set[str], on_demand_only: bool, remaining_h: float):
    """The planner's pick: the cheapest (start-up + remaining work) × price among unblocked offers."""
    best = None
    for o in offers:
        if o.key in blocked:
            continue
        for spot in ((False,) if on_demand_only or o.spot_price_per_hour is None else (True, False)):
            cost = o.hourly(spot) * (startup_hours(o) + remaining_h)
            if best is None or cost < best[0]:
                best = (cost, o, spot)
    return (best[1], best[2]) if best else (None, False)


def simulate_night(offers, rng: random.Random, *, rate: float, outage_h: float, job_h: float, ckpt_h: float,
                   deadline_h: float, max_preemptions: int) -> Night:
    t = cost = progress = lost = exposure = 0.0
    preemptions, blocked, on_demand_only = 0, set(), False
    # the trace: unit-exponential gaps divided by the rate (the same draws for every rate)
    next_preempt = rng.expovariate(1.0) / rate if rate > 0 else math.inf
    while True:
        offer, spot = choose(offers, blocked, on_demand_only, job_h - progress)
        if offer is None:  # every offer blocked: the runner stops with "provisioning failed everywhere"
            return Night(cost, t, False, preemptions, on_demand_only, lost)
        start = startup_hours(offer)
        attempt = start + (job_h - progress)  # launch + the rest of the job
        until_preempt = next_preempt - exposure if spot else math.inf
        span = min(attempt, deadline_h - t, until_preempt)
        cost += span * offer.hourly(spot)
        t += span
        if spot:
            exposure += span
        progress += max(0.0, span - start)
        if span == attempt:
            return Night(cost, t, t <= deadline_h + 1e-12, preemptions, on_demand_only, lost)
        if span < until_preempt:  # the deadline came first
            return Night(cost, t, False, preemptions, on_demand_only, lost)
        # preempted: back to the last checkpoint, block the offer, re-plan after the outage
        saved = ckpt_h * math.floor(progress / ckpt_h + 1e-9) if ckpt_h > 0 else 0.0
        lost += progress - saved
        progress = saved
        preemptions += 1
        blocked.add(offer.key)
        if preemptions >= max_preemptions:
            on_demand_only = True
        next_preempt = exposure + rng.expovariate(1.0) / rate
        t += rng.expovariate(1.0 / outage_h) if outage_h > 0 else 0.0
        if t >= deadline_h:
            return Night(cost, t, False, preemptions, on_demand_only, lost)


def month(offers, *, rate: float, seed: int, nights: int, **kw) -> list[Night]:
    return [simulate_night(offers, random.Random(seed * 1_000_003 + n), rate=rate, **kw) for n in range(nights)]


def summary(results: list[Night], baseline_cost: float) -> dict:
    n = len(results)
    done = [r for r in results if r.completed]
    cost = sum(r.cost for r in results)
    return {"ratio": cost / (baseline_cost * n), "completed": len(done) / n,
            "per_done": (cost / len(done)) / baseline_cost if done else math.inf,
            "preempt": sum(r.preemptions for r in results) / n,
            "fallback": sum(r.on_demand_fallback for r in results) / n,
            "lost": sum(r.lost_hours for r in results) / n,
            "wall": sum(r.hours for r in results) / n}


def main() -> None:
    from orchestrator.planning.spec import JobSpec

    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=0.1, help="preemptions per spot-instance-hour")
    ap.add_argument("--duration", type=float, default=10.0, help="mean outage after a preemption, minutes")
    ap.add_argument("--job-hours", type=float, default=3.0, help="the job's own run time (no start-up)")
    ap.add_argument("--checkpoint-minutes", type=float, default=30.0, help="minutes of progress between checkpoints")
    ap.add_argument("--deadline-hours", type=float, default=8.0)
    ap.add_argument("--max-preemptions", type=int, default=JobSpec.model_fields["max_preemptions"].default)
    ap.add_argument("--gpu", default="T4")
    ap.add_argument("--nights", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for name in ("rate", "duration", "checkpoint_minutes"):
        if getattr(args, name) < 0:
            ap.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.job_hours <= 0 or args.deadline_hours <= 0 or args.nights < 1:
        ap.error("--job-hours, --deadline-hours and --nights must be positive")

    gpu, offers = offers_for(args.gpu)
    kw = dict(outage_h=args.duration / 60, job_h=args.job_hours, ckpt_h=args.checkpoint_minutes / 60,
              deadline_h=args.deadline_hours, max_preemptions=args.max_preemptions)
    od, _ = choose(offers, set(), True, args.job_hours)
    od_hours = startup_hours(od) + args.job_hours
    baseline = od.price_per_hour * od_hours
    first, first_spot = choose(offers, set(), False, args.job_hours)
    spot_line = f"{first.label} {'spot' if first_spot else 'on-demand'} ${first.hourly(first_spot):.4f}/h"
    print(f"{gpu}: on-demand {od.label} ${od.price_per_hour:.4f}/h ({od.price_date}); first spot pick {spot_line}; "
          f"{sum(o.spot_price_per_hour is not None for o in offers)} spot offers to fail over to")
    print(f"job {args.job_hours:g} h + start-up (estimator: {startup_hours(od) * 60:.1f} min on {od.cloud}), "
          f"checkpoint every {args.checkpoint_minutes:g} min, deadline {args.deadline_hours:g} h, "
          f"max_preemptions {args.max_preemptions}, outage {args.duration:g} min mean, "
          f"{args.nights} nights, seed {args.seed}")
    if od_hours > args.deadline_hours:
        print(f"note: even on-demand ({od_hours:.2f} h) misses the {args.deadline_hours:g} h deadline")

    s = summary(month(offers, rate=args.rate, seed=args.seed, nights=args.nights, **kw), baseline)
    print(f"\nat {args.rate:g} preemptions per spot-hour: cost spot-with-recovery / on-demand = {s['ratio']:.3f} "
          f"(per completed job {s['per_done']:.3f}), completion rate {s['completed'] * 100:.0f} %, "
          f"mean preemptions per job {s['preempt']:.2f}")
    print(f"\n{'rate/h':>6} {'cost ratio':>10} {'per done':>8} {'completed':>9} {'preempt/job':>11} "
          f"{'on-demand fallback':>18} {'lost work h':>11} {'wall h':>6}")
    for rate in TABLE_RATES:
        s = summary(month(offers, rate=rate, seed=args.seed, nights=args.nights, **kw), baseline)
        print(f"{rate:>6g} {s['ratio']:>10.3f} {s['per_done']:>8.3f} {s['completed'] * 100:>8.0f}% "
              f"{s['preempt']:>11.2f} {s['fallback'] * 100:>17.0f}% {s['lost']:>11.2f} {s['wall']:>6.2f}")
    print(f"(on-demand baseline: ${baseline:.2f} per night, {od_hours:.2f} h; ratios < 1 mean spot saves money)")


if __name__ == "__main__":
    main()
