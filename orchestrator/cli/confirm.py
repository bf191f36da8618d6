"""The question `dlrun submit` asks before anything billed starts, at a terminal only: the chosen offer, its
estimated cost and the budget. `--yes` skips it; without a terminal (a script, a schedule, a pipe) and with
`--detach` it is never asked. A "no" starts nothing and bills nothing (exit 0)."""
from __future__ import annotations

import sys

import click


def launch_approved(plan, spec) -> bool:
    """False when the user, asked at a terminal, declined the launch of the plan's billed choice."""
    from infra import capabilities
    from orchestrator.cli.render.plan_table import human_duration, money

    c = plan.chosen
    if c is None or not capabilities(c.offer.cloud).billed:
        return True  # this machine: nothing is billed
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return True  # never a question nobody can answer
    e = c.estimate
    cost = money(e.cost) if money(e.cost_high) == money(e.cost) else f"{money(e.cost)} to {money(e.cost_high)}"
    budget = f"budget {money(spec.budget.max_cost)}" if spec.budget.max_cost else "no budget (--max-cost)"
    click.echo(f"{c.offer.label}{' spot' if c.spot else ''} at {money(c.offer.hourly(c.spot))}/h: est. "
               f"{human_duration(e.total_seconds)}, {cost}; {budget}", err=True)
    return click.confirm("start it (billed)?", default=False, err=True)
