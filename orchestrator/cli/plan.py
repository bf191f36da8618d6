"""Click commands `dlrun plan` and `dlrun catalog [refresh]`, and run_plan() for `dlrun submit`."""
from __future__ import annotations

import json

import click

from infra import BACKEND_NAMES
from orchestrator.errors import NothingFitsError, UsageError

DEFAULT_ROWS_NOTE = "best row per cloud × GPU config × market; --all shows every candidate"


def run_plan(spec, backend: str | None = None, *, blocked: frozenset[str] = frozenset(), store=None,
             offers=None):
    """Plan a validated JobSpec over every backend it names; `backend` restricts to one."""
    from infra import BACKEND_NAMES
    from orchestrator.planning.planner import plan_job, restrict

    if backend is not None and backend not in BACKEND_NAMES:
        raise UsageError(f"--backend: '{backend}' is not one of {', '.join(BACKEND_NAMES)}")
    if store is None:
        from orchestrator.state.db import Store

        store = Store()
    return plan_job(restrict(spec, backend), blocked=blocked, store=store, offers=offers)


# --- rendering -------------------------------------------------------------------------------------

def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=180)  # piped or captured: room for it all


def _shown(plan, show_all: bool):
    ranked = plan.ranked
    if show_all:
        return ranked
    seen, rows = set(), []
    for c in ranked:
        group = (c.offer.cloud, c.offer.accelerator, c.offer.accelerator_count, c.spot, c.eligible)
        if group not in seen or c.chosen:
            seen.add(group)
            rows.append(c)
    return rows


def render_plan(plan, console=None, show_all: bool = False) -> None:
    from rich.table import Table

    console = console or _console()
    shown = _shown(plan, show_all)
    feasible = sum(c.feasible for c in plan.candidates)
    caption = f"{len(plan.candidates)} candidates, {feasible} feasible; showing {len(shown)}"
    if not show_all and len(shown) < len(plan.candidates):
        caption += f" ({DEFAULT_ROWS_NOTE})"
    table = Table(title="dlrun plan", caption=caption, show_lines=False)
    for col, kw in (("backend", {}), ("instance", {}), ("GPU", {}), ("spot", {}), ("fits", {}),
                    ("est. hours", {"justify": "right"}), ("est. $", {"justify": "right"}),
                    ("$/h", {"justify": "right"}), ("chosen", {}), ("why excluded", {"overflow": "fold"})):
        table.add_column(col, **kw)
    for c in shown:
        o, e = c.offer, c.estimate
        gpu = f"{o.accelerator}×{o.accelerator_count}" if o.accelerator else "CPU"
        where = o.region if o.cloud != "local" else ""
        table.add_row(o.cloud + (f" {where}" if where else ""), o.instance_type, gpu,
                      "spot" if c.spot else "-", "yes" if e.fits else "NO",
                      f"{e.hours:.3f}", f"{e.cost:.2f}", f"{e.price_per_hour:.3f}",
                      "★" if c.chosen else "", c.reason or "",
                      style="bold green" if c.chosen else ("dim" if not c.feasible else None))
    console.print(table)
    for note in plan.notes:
        console.print(f"[yellow]note:[/] {note}")
    p = plan.profile
    if p is not None and p.source == "measured":
        local = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in p.local_step_seconds.items()) or "not measured"
        console.print(f"profile: {p.model} ({p.model_family}), {p.params:,} params, "
                      f"{p.flops_per_step / 1e9:.2f} GFLOP/step, {p.total_steps:,} steps; local step: {local}")
    if plan.chosen:
        c = plan.chosen
        console.print(f"chosen: [bold]{c.offer.label}{' spot' if c.spot else ''}[/] — "
                      f"est. {c.estimate.hours:.2f} h, ${c.estimate.cost:.2f}")


# --- commands --------------------------------------------------------------------------------------

@click.command("plan")
@click.argument("job_file", type=click.Path(dir_okay=True))
@click.option("--max-cost", type=float, default=None, help="budget in USD for the whole job")
@click.option("--deadline", default=None, help="wall-clock limit, e.g. 4h or 90m")
@click.option("--backend", type=click.Choice(BACKEND_NAMES), default=None, help="plan for one backend only")
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="write est. hours vs est. $ for every candidate to this PNG")
@click.option("--all", "show_all", is_flag=True, help="show every candidate, not the best per GPU config")
def plan_command(job_file, max_cost, deadline, backend, as_json, plot_path, show_all):
    """Predict hours and dollars on every backend and pick the cheapest that fits."""
    from orchestrator.planning.spec import load_job

    spec = load_job(job_file, max_cost=max_cost, deadline=deadline)
    result = run_plan(spec, backend)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render_plan(result, show_all=show_all)
    if plot_path:
        from orchestrator.cli.render.plot import plot_plan

        click.echo(f"plot written to {plot_plan(result, plot_path)}", err=as_json)
    if result.chosen is None:
        raise NothingFitsError(result.nothing_fits_message(), plan=result)


@click.group("catalog", invoke_without_command=True)
@click.option("--gpu", default=None, help="only offers with this GPU (e.g. T4)")
@click.option("--cloud", type=click.Choice(["aws", "gcp"]), default=None)
@click.option("--region", default=None)
@click.pass_context
def catalog_group(ctx, gpu, cloud, region):
    """List the offers of the catalog (prices with their dates)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from infra.catalog import canonical_gpu, load_offers

    want = None
    if gpu:
        want = canonical_gpu(gpu)
        if want is None:
            from infra.catalog import gpu_names

            raise UsageError(f"--gpu: unknown GPU '{gpu}'; known: {', '.join(gpu_names())}")
    offers = [o for o in load_offers() if (cloud is None or o.cloud == cloud)
              and (want is None or (o.accelerator and canonical_gpu(o.accelerator) == want))
              and (region is None or o.region == region)]
    table = Table(title=f"catalog: {len(offers)} offers")
    for col in ("cloud", "region", "instance", "GPU", "GPU GB", "vCPU", "RAM GB", "$/h", "spot $/h",
                "price date", "spot date"):
        table.add_column(col, justify="right" if "$" in col or "GB" in col or col == "vCPU" else "left")
    for o in sorted(offers, key=lambda o: (o.accelerator or "", o.price_per_hour)):
        spot = f"{o.spot_price_per_hour:.4f}" if o.spot_price_per_hour is not None else "-"
        gcp_parts = (f" (host {o.host_price_per_hour:.3f} + GPU {o.gpu_price_per_hour:.3f})"
                     if o.host_price_per_hour is not None and o.gpu_price_per_hour is not None else "")
        table.add_row(o.cloud, o.region, o.instance_type, f"{o.accelerator or 'CPU'}×{o.accelerator_count}",
                      f"{o.gpu_memory_gb:g}", str(o.vcpus), f"{o.memory_gb:g}",
                      f"{o.price_per_hour:.4f}{gcp_parts}", spot, o.price_date, o.spot_price_date)
    _console().print(table)


@catalog_group.command("refresh")
@click.option("--region", "regions", multiple=True, help="AWS region(s); default: every catalog region")
def catalog_refresh_command(regions):
    """Update AWS spot prices from describe_spot_price_history (keeps each price's date)."""
    from orchestrator.planning.catalog_refresh import refresh_spot_prices, spot_prices_path

    rows = refresh_spot_prices(list(regions) or None)
    for r in rows:
        click.echo(f"{r['region']:<14} {r['instance_type']:<16} ${float(r['spot_price_per_hour']):.4f}/h "
                   f"({r['zone']}, {r['price_date']})")
    click.echo(f"{len(rows)} spot prices written to {spot_prices_path()}")


COMMANDS = (plan_command, catalog_group)
