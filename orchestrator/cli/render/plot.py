"""`dlrun plan --plot plan.png`: est. hours vs est. dollars for every candidate, Pareto frontier, choice."""
from __future__ import annotations

from pathlib import Path

from infra import BACKEND_NAMES

COLORS = {"local": "#2ca02c", "aws": "#ff7f0e", "gcp": "#1f77b4"}
# the local backend costs $0: put it on the log axis just below the cheapest paid candidate
ZERO_COST_FLOOR = 0.5


def pareto_frontier(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points not dominated in (hours, cost), sorted by hours."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    frontier, best_cost = [], float("inf")
    for i in order:
        if points[i][1] < best_cost:
            frontier.append(i)
            best_cost = points[i][1]
    return frontier


def plot_plan(plan, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cands = [c for c in plan.candidates if c.eligible and c.estimate.fits]
    excluded = [c for c in plan.candidates if not (c.eligible and c.estimate.fits)]
    paid = [c.estimate.cost for c in plan.candidates if c.estimate.cost > 0]
    floor = min(paid) * ZERO_COST_FLOOR if paid else 0.01

    def xy(c):
        return c.estimate.hours, max(c.estimate.cost, floor)

    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    if excluded:
        ax.scatter(*zip(*map(xy, excluded)), marker="x", s=18, color="#bbbbbb", label="excluded (spec / memory)")
    for cloud in BACKEND_NAMES:
        for spot, marker in ((False, "o"), (True, "^")):
            pts = [xy(c) for c in cands if c.offer.cloud == cloud and c.spot == spot]
            if pts:
                ax.scatter(*zip(*pts), marker=marker, s=30, alpha=0.75, color=COLORS[cloud],
                           label=f"{cloud} {'spot' if spot else 'on-demand'}")
    if cands:
        pts = [xy(c) for c in cands]
        front = [pts[i] for i in pareto_frontier(pts)]
        ax.plot(*zip(*front), "-", color="black", lw=1.2, label="Pareto frontier (fastest per $)")
    if plan.max_cost is not None:
        ax.axhline(plan.max_cost, ls="--", color="red", lw=1, label=f"budget ${plan.max_cost:g}")
    if plan.deadline_seconds is not None:
        ax.axvline(plan.deadline_seconds / 3600, ls=":", color="purple", lw=1,
                   label=f"deadline {plan.deadline_seconds / 3600:g} h")
    if plan.chosen:
        x, y = xy(plan.chosen)
        ax.scatter([x], [y], marker="*", s=320, color="gold", edgecolor="black", zorder=5,
                   label=f"chosen: {_name(plan.chosen)}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("estimated wall-clock time (hours, incl. start-up; log scale)")
    ax.set_ylabel("estimated cost (USD, log scale; $0 local shown at the floor)")
    title = plan.profile.model if plan.profile is not None else "job"
    ax.set_title(f"dlrun plan: {title} — {len(plan.candidates)} candidates")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def _name(c) -> str:
    o = c.offer
    where = "this machine" if o.cloud == "local" else f"{o.cloud} {o.region}"
    gpu = f"{o.accelerator}×{o.accelerator_count}" if o.accelerator else "CPU"
    return f"{where} {o.instance_type} ({gpu}){' spot' if c.spot else ''}"
