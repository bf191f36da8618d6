"""The plan as a person reads it: a table that fits 100 columns, human durations, the one-line choice."""
from __future__ import annotations

from infra import capabilities

WIDTH = 100
DEFAULT_ROWS = 12  # the chosen candidate and the best of each GPU configuration, up to this many


def human_duration(seconds: float) -> str:
    """dlrun's one duration format: 4.2 s, 12 s, 6 min, 3.2 h, 9 d, 3.4 years (the unit a person would say)."""
    if seconds < 9.95:
        return f"{max(seconds, 0.0):.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    hours = seconds / 3600
    if hours < 10:
        return f"{hours:.1f} h"
    if hours < 72:
        return f"{hours:.0f} h"
    days = hours / 24
    if days < 365:
        return f"{days:.0f} d"
    return f"{days / 365:,.1f} years"


def money(amount: float) -> str:
    """dlrun's one money format (orchestrator/cost.usd)."""
    from orchestrator.cost import usd

    return usd(amount)


def gpu_config(offer) -> str:
    return f"{offer.accelerator_count}×{offer.accelerator}" if offer.accelerator else "CPU"


def _config(c) -> str:
    """A row's GPU configuration; a team cluster's is its own (shown beside the clouds', not hidden by them)."""
    return gpu_config(c.offer) + (f" {c.offer.cloud}" if c.offer.extra.get("cluster") else "")


def _kept_out_by_account(c) -> bool:
    """Excluded by what the account or a team cluster can give, not by the job's own choices: shown."""
    return (c.reason or "").startswith(("quota: ", "cluster "))


def where(offer) -> str:
    """`aws us-east-1`, `cluster:gpu-lab REGION`; this machine: `local`."""
    return f"{offer.cloud} {offer.region}" if capabilities(offer.cloud).remote else offer.cloud


def shown(plan, show_all: bool) -> list:
    """Every candidate (--all), or the chosen one and the best of each GPU configuration the spec
    allows, feasible configurations first, at most DEFAULT_ROWS rows."""
    ranked = plan.ranked
    if show_all:
        return ranked
    rows, seen = [], set()
    if plan.chosen is not None:
        rows.append(plan.chosen)
        seen.add(_config(plan.chosen))
        if plan.runner_up is not None:  # named under the table as the runner-up: a row of it too
            rows.append(plan.runner_up)
            seen.add(_config(plan.runner_up))
    for c in ranked:
        if len(rows) >= DEFAULT_ROWS or not c.eligible:
            break
        if _config(c) not in seen:
            seen.add(_config(c))
            rows.append(c)
    # configurations only the account's quotas (or a team cluster's size) keep out: their best candidate, saying why
    for c in sorted((c for c in ranked if not c.eligible and _kept_out_by_account(c)),
                    key=lambda c: (c.estimate.cost, c.offer.key)):
        if len(rows) >= DEFAULT_ROWS:
            break
        if _config(c) not in seen:
            seen.add(_config(c))
            rows.append(c)
    return rows


def _cells(c) -> dict[str, str]:
    o, e = c.offer, c.estimate
    return {"": "★" if c.chosen else "", "where": where(o),
            "instance": o.instance_type if capabilities(o.cloud).remote else "",
            "GPU": gpu_config(o), "market": "spot" if c.spot else (c.wait or ""),
            "time": human_duration(e.total_seconds), "cost": money(e.cost),
            "up to": money(e.cost_high) if money(e.cost_high) != money(e.cost) else "",
            "$/h": money(e.price_per_hour) if e.price_per_hour else "", "why not": c.reason or ""}


RIGHT = {"time", "cost", "up to", "$/h"}


def caption(plan, rows: list) -> str:
    feasible = sum(c.feasible for c in plan.candidates)
    text = f"{len(plan.candidates)} candidates, {feasible} feasible"
    if len(rows) < len(plan.candidates):
        text += f"; the best per GPU configuration shown, --all for the other {len(plan.candidates) - len(rows)}"
    return text


def plan_table(plan, rows: list):
    from rich import box
    from rich.table import Table

    cells = [_cells(c) for c in rows]
    columns = [k for k in (cells[0] if cells else {}) if any(r[k] for r in cells)]  # no empty columns
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for k in columns:
        table.add_column(k, justify="right" if k in RIGHT else "left",
                         overflow="fold" if k == "why not" else "ellipsis", no_wrap=k != "why not")
    for c, r in zip(rows, cells, strict=True):
        table.add_row(*(r[k] for k in columns), style="bold green" if c.chosen else ("dim" if not c.feasible else None))
    return table


def choice_line(plan) -> str:
    """`submit`'s one line before it starts: where, how long, how much, and what came second."""
    c = plan.chosen
    if c is None:
        return "nothing fits"
    e = c.estimate
    market = " spot" if c.spot else ""
    line = f"running on {c.offer.label}{market}: est. {human_duration(e.total_seconds)}, {money(e.cost)}"
    if money(e.cost_high) != money(e.cost):
        line += f" (up to {money(e.cost_high)})"
    line += f"; {human_duration(e.startup_seconds)} of it start-up, {human_duration(e.run_seconds)} the run"
    second = plan.runner_up
    if second is not None:
        line += (f" (runner-up: {second.offer.label}{' spot' if second.spot else ''}, "
                 f"{human_duration(second.estimate.total_seconds)}, {money(second.estimate.cost)})")
    return line


def render_plan(plan, console=None, show_all: bool = False) -> None:
    from rich.console import Console

    if console is None:  # piped or captured: 100 columns, or room for whole rows with --all
        console = Console()
        console = console if console.is_terminal else Console(width=180 if show_all else WIDTH)
    rows = shown(plan, show_all)
    console.print(plan_table(plan, rows))
    console.print(caption(plan, rows))
    flags = [plan.zone_flags[k] for k in dict.fromkeys(c.offer.key for c in rows if c.spot) if k in plan.zone_flags]
    for note in plan.notes + flags:
        console.print(f"[yellow]note:[/] {note}", overflow="fold")
    p = plan.profile
    if p is not None and p.source == "measured":
        local = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in p.local_step_seconds.items()) or "not measured"
        console.print(f"profile: {p.model} ({p.model_family}), {p.params:,} params, "
                      f"{p.flops_per_step / 1e9:.2f} GFLOP/step, {p.total_steps:,} steps; local step: {local}")
    if plan.chosen and plan.chosen.estimate.accelerator != "cpu":
        e = plan.chosen.estimate
        console.print(f"step on {e.accelerator}: {e.step_seconds * 1000:.1f} ms (90 %: {e.step_low * 1000:.1f}–"
                      f"{e.step_high * 1000:.1f} ms; {e.basis}); the budget is checked against the high end")
        if e.detail:
            console.print(f"  {e.detail}", overflow="fold")
    objective = "fastest" if plan.optimize == "time" else "cheapest"
    if plan.chosen:
        console.print(f"chosen: [bold]{choice_line(plan).removeprefix('running on ')}[/] — the {objective} that fits")
