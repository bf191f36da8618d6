"""`dlrun plan --plot plan.png`: est. hours vs est. dollars for every candidate, Pareto frontier, choice."""
from __future__ import annotations

from pathlib import Path

from infra import BACKEND_NAMES, capabilities, kind

COLORS = {"local": "#2ca02c", "aws": "#ff7f0e", "gcp": "#1f77b4", "cluster": "#9467bd"}


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
    import matplotlib.pyplot as plt

    fig = plan_figure(plan)
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out


def plan_figure(plan):
    """Feasible candidates filled, candidates over the budget or deadline hollow, those the spec or
    memory rules out as grey crosses; cost on a symlog axis, so $0 (this machine) sits at 0, truly."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workable = [c for c in plan.candidates if c.eligible and c.estimate.fits]
    excluded = [c for c in plan.candidates if not (c.eligible and c.estimate.fits)]
    paid = [c.estimate.cost for c in plan.candidates if c.estimate.cost > 0]

    def xy(c) -> tuple[float, float]:  # zip(*points, strict=True): the xs and the ys
        return c.estimate.hours, c.estimate.cost

    fig, ax = plt.subplots(figsize=(9, 6), dpi=110)
    if excluded:
        ax.scatter(*zip(*map(xy, excluded), strict=True), marker="x", s=18, color="#bbbbbb",
                   label="ruled out (spec / memory)")
    for cloud in BACKEND_NAMES:
        for spot, marker in ((False, "o"), (True, "^")):
            market = "spot" if spot else "on-demand"
            for feasible in (True, False):
                pts = [xy(c) for c in workable if kind(c.offer.cloud) == cloud and c.spot == spot
                       and c.feasible == feasible]
                if not pts:
                    continue
                style = {"color": COLORS[cloud]} if feasible else {"facecolors": "none", "edgecolors": COLORS[cloud]}
                ax.scatter(*zip(*pts, strict=True), marker=marker, s=30, alpha=0.8, **style,
                           label=f"{cloud} {market}" + ("" if feasible else ", over budget/deadline"))
    if workable:
        pts = [xy(c) for c in workable]
        front = [pts[i] for i in pareto_frontier(pts)]
        ax.plot(*zip(*front, strict=True), "-", color="black", lw=1.2, label="Pareto frontier (fastest per $)")
    if plan.max_cost is not None:
        ax.axhline(plan.max_cost, ls="--", color="red", lw=1, label=f"budget ${plan.max_cost:g}")
    if plan.deadline_seconds is not None:
        default = " (default)" if plan.default_deadline else ""
        ax.axvline(plan.deadline_seconds / 3600, ls=":", color="purple", lw=1,
                   label=f"deadline {plan.deadline_seconds / 3600:g} h{default}")
    if plan.chosen:
        x, y = xy(plan.chosen)
        ax.scatter([x], [y], marker="*", s=320, color="gold", edgecolor="black", zorder=5,
                   label=f"chosen: {_name(plan.chosen)}")
    ax.set_xscale("log")
    # linear below the cheapest paid candidate, log above: $0 is drawn at 0, not at a made-up floor
    ax.set_yscale("symlog", linthresh=min(paid) if paid else 0.01)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("estimated wall-clock time (hours, incl. start-up; log scale)")
    ax.set_ylabel("estimated cost (USD; symlog: $0 at 0, log above the cheapest paid)")
    title = plan.profile.model if plan.profile is not None else "job"
    ax.set_title(f"dlrun plan: {title} — {len(plan.candidates)} candidates")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def _name(c) -> str:
    o = c.offer
    where = f"{o.cloud} {o.region}" if capabilities(o.cloud).remote else "this machine"
    gpu = f"{o.accelerator}×{o.accelerator_count}" if o.accelerator else "CPU"
    return f"{where} {o.instance_type} ({gpu}){' spot' if c.spot else ''}"
