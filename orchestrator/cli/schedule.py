"""Click commands for schedules: `dlrun schedule add|list|runs|remove|pause|resume` and `dlrun scheduler`
(their errors end the command as every dlrun error does: orchestrator/cli/main.py)."""
from __future__ import annotations

import json
import logging
import sys

import click

from orchestrator.cli.params import USD, override_options

# orchestrator.state.schedules (the job file's model: pydantic) and the cron module are imported by
# the commands that use them, so that `dlrun schedule --help` stays light


def _store():
    from orchestrator.state.db import Store

    return Store()


def _notify() -> bool:
    """Tell a running `dlrun scheduler` that the schedules changed; False when none runs."""
    from orchestrator.schedule.scheduler import notify_scheduler

    return notify_scheduler()


NO_SCHEDULER = ("note: no `dlrun scheduler` is running for this $DLRUN_HOME; nothing fires until one does "
                "(start it, e.g. under systemd: dlrun scheduler)")


@click.group("schedule")
def schedule():
    """Run a job on a cron schedule, in your time zone (`dlrun scheduler` does the firing)."""


@schedule.command("add")
@click.argument("job_file", type=click.Path(dir_okay=False))
@click.option("--cron", required=True, help='5 fields: minute hour day-of-month month day-of-week '
              '(0 or 7 = Sunday), e.g. "0 2 * * *"')
@click.option("--tz", default=None, help="IANA time zone of the cron times (default: this machine's)")
@click.option("--max-cost", type=USD, default=None, help="USD cap for each run (overrides the job file)")
@click.option("--name", default=None, help="schedule name (default: the job's name)")
@click.option("--follow-file", is_flag=True, help="re-read JOB_FILE at each run instead of the copy taken now")
@click.option("--monthly-cap", type=USD, default=None,
              help="USD per calendar month for this schedule; a run that could pass it is skipped")
@override_options
def add(job_file, cron, tz, max_cost, name, follow_file, monthly_cap, overrides):
    """Schedule JOB_FILE; a copy of the file is stored now (see --follow-file). --gpus, --cloud, --region,
    --spot/--on-demand and --env apply to every run."""
    from orchestrator.schedule import cron as st
    from orchestrator.state import schedules as ss

    sched = ss.add_schedule(_store(), job_file, cron, tz=tz, max_cost=max_cost, name=name,
                            follow_file=follow_file, monthly_cap=monthly_cap, overrides=overrides)
    running = _notify()
    click.echo(f"schedule {sched.name} ({sched.cron}, {sched.tz}): next run "
               f"{st.fmt_local(sched.next_run_at, sched.tz)}; job file {sched.job_path} "
               f"{'followed' if sched.follow_file else 'copied'} (hash {sched.job_hash})"
               + (f"; every run with {overrides.as_flags()}" if overrides else ""))
    if not running:
        click.echo(NO_SCHEDULER, err=True)


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def list_(as_json):
    """Schedules with their next run, last run and result, and what they spent."""
    from orchestrator.state import schedules as ss

    store = _store()
    views = [ss.describe(store, sched) for sched in ss.list_schedules(store)]
    if as_json:  # times in ISO 8601 with the schedule's UTC offset; null where there is none
        click.echo(json.dumps([v.to_json() for v in views], indent=2))
        return
    if not views:
        click.echo("no schedules; add one with: dlrun schedule add job.yaml --cron '0 2 * * *'")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None)
    for col in ("NAME", "CRON", "TZ", "NEXT RUN", "LAST RUN", "RESULT", "SPENT", "THIS MONTH"):
        table.add_column(col, justify="right" if col in ("SPENT", "THIS MONTH") else "left")
    for v in views:
        month = f"${v.spent_month:.2f}" + (f" / ${v.monthly_cap:.2f}" if v.monthly_cap else "")
        result = (v.last_result or "-") + (f" {v.last_job_id}" if v.last_job_id else "")
        table.add_row(v.name, v.cron, v.tz, v.next_run_text, v.last_run_text, result, f"${v.spent_total:.2f}",
                      month)
    Console(width=200).print(table)


@schedule.command("runs")
@click.argument("name")
@click.option("--limit", type=int, default=20, show_default=True)
def runs(name, limit):
    """The firing history of one schedule: due time, outcome, job."""
    from orchestrator.schedule import cron as st
    from orchestrator.state import schedules as ss

    store = _store()
    history = ss.runs(store, name)  # an unknown name: a UsageError listing the schedules there are
    sched = ss.get_schedule(store, name)
    assert sched is not None  # runs() found it
    tz = sched.tz
    if not history:
        click.echo(f"{name}: no firings yet")
    for r in history[-limit:]:
        click.echo(f"{st.fmt_local(r.due_at, tz)}  {r.outcome:<16} {r.job_id or '-':<16} {r.detail}")


@schedule.command("remove")
@click.argument("name")
def remove(name):
    """Delete a schedule (its jobs and their history stay)."""
    from orchestrator.state import schedules as ss

    sched = ss.remove_schedule(_store(), name)
    _notify()
    click.echo(f"removed schedule {sched.name}")


@schedule.command("pause")
@click.argument("name")
def pause(name):
    """Stop firing NAME until `dlrun schedule resume NAME`."""
    from orchestrator.state import schedules as ss

    sched = ss.set_paused(_store(), name, True)
    _notify()
    click.echo(f"paused schedule {sched.name}")


@schedule.command("resume")
@click.argument("name")
def resume(name):
    """Fire NAME again from its next occurrence (runs missed while paused are not caught up)."""
    from orchestrator.schedule import cron as st
    from orchestrator.state import schedules as ss

    sched = ss.set_paused(_store(), name, False)
    running = _notify()
    click.echo(f"resumed schedule {sched.name}: next run {st.fmt_local(sched.next_run_at, sched.tz)}")
    if not running:
        click.echo(NO_SCHEDULER, err=True)


@click.command("scheduler")
@click.option("--recheck", type=float, default=60.0, show_default=True,
              help="seconds between re-reads of the schedules when nothing is due")
@click.option("-q", "--quiet", is_flag=True, help="log only warnings")
def scheduler(recheck, quiet):
    """Fire due schedules until stopped (run it under systemd or another process manager)."""
    from orchestrator.schedule.scheduler import serve

    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    if not recheck > 0:
        raise click.BadParameter("must be > 0", param_hint="--recheck")
    serve(recheck_s=recheck)
