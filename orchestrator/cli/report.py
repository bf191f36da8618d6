"""`dlrun cost-report` and `dlrun dashboard`."""
from __future__ import annotations

import json

import click


@click.command("cost-report")
@click.option("--json", "as_json", is_flag=True)
def cost_report(as_json):
    """Per job and per day: backend, GPU, spot, preemptions, estimated vs actual hours and $."""
    from orchestrator.monitoring.costs import build_cost_report
    from orchestrator.state.db import default_store

    report = build_cost_report(default_store())
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
        return
    if not report.jobs:
        click.echo("no jobs yet, nothing spent: `dlrun plan JOB_FILE` says what a job would cost, "
                   "`dlrun submit JOB_FILE` runs it")
        return
    from orchestrator.cli.render.fit import Col, fit_table
    from orchestrator.cli.render.summary import console, plural
    from orchestrator.cost import usd

    cols = [Col("day"), Col("job"), Col("name", free=True), Col("status", spare=3), Col("backend", free=True),
            Col("gpu", spare=4), Col("spot", spare=6), Col("preempt", True, spare=5), Col("est h", True, spare=2),
            Col("actual h", True, spare=1), Col("est.", True), Col("actual", True)]
    rows: list[tuple] = [(r.day, r.job, r.name, r.status, r.backend or "-", r.gpu or "-", "yes" if r.spot else "no",
                          str(r.preemptions), f"{r.est_hours:.4f}", f"{r.actual_hours:.4f}", usd(r.est_cost),
                          usd(r.actual_cost)) for r in report.jobs]
    for day, d in sorted(report.days.items()):
        rows.append((day, f"[bold]{plural(d.jobs, 'job')}[/]", "", "", "", "", "", "", "", "",
                     usd(d.est_cost), f"[bold]{usd(d.actual_cost)}[/]"))
    total = report.total
    rows.append(("total", f"[bold]{plural(total.jobs, 'job')}[/]", "", "", "", "", "", "", "", "",
                 usd(total.est_cost), f"[bold]{usd(total.actual_cost)}[/]"))
    out = console()
    table, left_out = fit_table("dlrun cost report (USD)", cols, rows, out.width)
    out.print(table)
    if left_out:
        click.echo(f"left out at this width: {', '.join(left_out)} (--json has every field)")


@click.command()
@click.argument("job_id", required=False)
@click.option("--open", "open_browser", is_flag=True, help="open it in a browser")
@click.option("--metrics", is_flag=True, help="also start Prometheus and Grafana when installed")
@click.option("--no-login", is_flag=True, help="print the plain dashboard URL (the browser asks for the token)")
@click.option("--url", "url_only", is_flag=True, help="print the plain dashboard URL and exit at once (for scripts)")
def dashboard(job_id, open_browser, metrics, no_login, url_only):
    """The Ray dashboard URL of JOB's cluster (local, or through an SSH tunnel to a cloud head).

    Prints a one-use link that logs the browser in (the cluster's Ray token, as the dashboard's own
    cookie) and lands on the dashboard; it waits until the link is opened (5 minutes at most).
    --url prints the plain URL and exits at once."""
    from orchestrator.monitoring.dashboard import find_dashboard, hold_open, login_link, wait_for_login
    from orchestrator.state.db import default_store

    board = find_dashboard(default_store(), job_id)
    if board.foreign_head:
        click.echo("(a Ray head dlrun did not start; dlrun attaches to it for local jobs)", err=True)
    if url_only:
        click.echo(board.url)
        if board.tunnel is not None:
            click.echo("(the SSH tunnel to the cloud head closes as this command exits: `dlrun dashboard "
                       f"{job_id or ''}` keeps it open)".replace("  ", " "), err=True)
        return
    login = None if no_login else login_link(board)
    click.echo(login.url if login else board.url)
    if login:
        click.echo(f"(a one-use link that logs this browser in and opens {board.url}; it waits up to "
                   f"{login.ttl_s / 60:.0f} minutes for it, Ctrl-C stops)", err=True)
    if metrics:
        from orchestrator.monitoring.metrics_stack import start_metrics_stack

        for line in start_metrics_stack():
            click.echo(line)
    if open_browser:
        import webbrowser

        webbrowser.open(login.url if login else board.url)
    if login is not None and board.tunnel is None:
        wait_for_login(login)
    if board.tunnel is not None:
        click.echo("(tunnel open; Ctrl-C closes it)")
        hold_open(board.tunnel)
