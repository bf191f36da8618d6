"""`dlrun`: Click commands only — parse, call one function, render, exit code.

Kept import-light: no ray/torch/boto3/google import happens until a command needs it.
"""
from __future__ import annotations

import importlib
import os
import sys
import time

import click

from orchestrator.cli.params import BACKEND_METAVAR, USD, override_options
from orchestrator.errors import (EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_TERMINATED, DlrunError,
                                 UsageError)

# commands living in their own modules, imported only when run (or asked for their own --help);
# `dlrun --help` lists them from the short help kept here (a test checks it matches each command's)
LAZY_COMMANDS = {
    "plan": ("orchestrator.cli.plan", "plan_command",
             "Predict hours and dollars on every backend and pick the cheapest that fits."),
    "catalog": ("orchestrator.cli.plan", "catalog_group", "List the offers of the catalog (prices with their dates)."),
    "estimate": ("orchestrator.cli.estimate", "estimate_command",
                 "Predict the job's step time, samples/s and run time on GPUs, with the basis and range of each."),
    "schedule": ("orchestrator.cli.schedule", "schedule",
                 "Run a job on a cron schedule, in your time zone (`dlrun scheduler` does the firing)."),
    "scheduler": ("orchestrator.cli.schedule", "scheduler",
                  "Fire due schedules until stopped (run it under systemd or another process manager)."),
    "cost-report": ("orchestrator.cli.report", "cost_report",
                    "Per job and per day: backend, GPU, spot, preemptions, estimated vs actual hours and $."),
    "clusters": ("orchestrator.cli.clusters", "clusters",
                 "The team Ray clusters of config.yaml and what they have free now."),
    "check": ("orchestrator.cli.check", "check_command",
              "Which backends can run a job: credentials, account, regions, GPU quotas; what fixes the rest."),
    "dashboard": ("orchestrator.cli.report", "dashboard",
                  "The Ray dashboard URL of JOB's cluster (local, or through an SSH tunnel to a cloud head)."),
    "ui": ("orchestrator.cli.ui", "ui_command",
           "Web pages of every job, its plan, curves and logs, schedules and cost (127.0.0.1, with a token)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx, name):
        if name in LAZY_COMMANDS:
            module, attr, _ = LAZY_COMMANDS[name]
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)

    def format_commands(self, ctx, formatter):
        """Like click's, but the lazy commands' lines come from LAZY_COMMANDS: listing them imports nothing."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(n) for n in names)
        listed = [(name, self._as_listed(name)) for name in names]
        rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in listed if not cmd.hidden]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _as_listed(self, name: str) -> click.Command:
        """The command as the list shows it: a lazy one by a stand-in holding its short help."""
        if name in LAZY_COMMANDS:
            return click.Command(name, help=LAZY_COMMANDS[name][2])
        return self.commands[name]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="dlrun")
def cli():
    """Run a training job wherever it is cheapest: local Ray, AWS or GCP, on-demand or spot.

    \b
    Exit codes: 0 ok · 1 the job failed · 2 bad input · 3 nothing fits the budget/deadline
                4 credentials missing (a cloud's, a Ray head's token) · 5 provisioning failed everywhere
                130 interrupted (Ctrl-C) · 143 terminated (SIGTERM: the job is cancelled as on Ctrl-C)
    """


@cli.command()
@click.argument("job_file", type=click.Path(dir_okay=False))
@click.option("--max-cost", type=USD, help="USD for the whole job (overrides budget.max_cost)")
@click.option("--deadline", help="wall-clock limit, e.g. 4h (overrides budget.deadline)")
@click.option("--backend", default=None, metavar=BACKEND_METAVAR, help="only consider this backend")
@click.option("--detach", is_flag=True, help="return the job id at once; a supervisor runs the job")
@click.option("--fresh", is_flag=True, help="start the run over: remove its checkpoints instead of resuming")
@click.option("--optimize", type=click.Choice(["cost", "time"]), default=None,
              help="run on the cheapest (cost) or the fastest (time) backend that fits")
@click.option("--yes", "-y", is_flag=True, help="start without asking (asked only at a terminal, for a billed backend)")
@override_options
def submit(job_file, max_cost, deadline, backend, detach, fresh, optimize, yes, overrides):
    """Plan, provision, run and watch JOB_FILE; always tears down what it started."""
    from orchestrator.cli.confirm import launch_approved
    from orchestrator.cli.plan import warm_profile, with_objective
    from orchestrator.cli.render.plan_table import choice_line
    from orchestrator.cli.render.display import make_display
    from orchestrator.errors import NothingFitsError
    from orchestrator.planning.spec import load_job
    from orchestrator.planning.overrides import with_overrides
    from orchestrator.planning.usable import require_usable
    from orchestrator.planning.workload_check import check_workload
    from orchestrator.runs import executor as runner
    from orchestrator.runs.finished_run import finished_before
    from orchestrator.runs.sigterm import cancel_on_sigterm

    cancel_on_sigterm()  # a process manager's or CI's stop cancels and tears down, as Ctrl-C does
    spec = with_objective(with_overrides(load_job(job_file, max_cost=max_cost, deadline=deadline), overrides),
                          optimize)
    done = None if fresh else finished_before(spec, runner.default_store())
    if done:  # resubmitted after it finished: nothing to train, nothing planned (stdout stays a job id's)
        click.echo(done, err=detach)
        return
    require_usable(spec, backend)  # before profiling: only clouds without credentials fit -> exit 4
    check_workload(spec, job_file)  # the model takes workload.input_shape, or exit 2 naming it
    try:
        warm_profile(spec)
        plan = runner.plan_for_submit(spec, backend, store=runner.default_store())  # + history
        click.echo(choice_line(plan), err=True)
    except NothingFitsError as e:
        _print_plan(e.plan)
        raise
    except KeyboardInterrupt as e:
        raise type(e)("while planning; nothing was started") from None
    if not (yes or detach or launch_approved(plan, spec)):
        click.echo("not started: nothing was launched or billed", err=True)
        return
    if detach:
        res = runner.submit(spec, backend=backend, detach=True, plan=plan, fresh=fresh)
        click.echo(res.job_id)
        return
    display = make_display(sys.stderr)
    started = time.time()
    try:
        res = runner.submit(spec, backend=backend, display=display, plan=plan, fresh=fresh)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (sigterm.Terminated): the same cancel
        display.close()  # before the summary, so that it is not drawn over
        raise type(e)(_interrupted_summary(started)) from None
    finally:
        display.close()
    from orchestrator.cli.render.summary import result_line
    from orchestrator.state.db import default_store

    click.echo(result_line(default_store(), res.job_id))  # the one line that says how it ended
    left = head_left_up(default_store(), res.job_id)
    if left:
        click.echo(left, err=True)
    sys.exit(res.exit_code)


def head_left_up(store, job_id: str) -> str:
    """What stays up after a job on this machine: the Ray head dlrun started (kept for the next job and the
    dashboard), and how to stop it; "" for a cloud job (its cluster is gone) or a head dlrun did not start."""
    from infra import capabilities
    from infra.local.head import recorded_head

    job = store.get_job(job_id)
    if job is None or not job.backend or capabilities(job.backend).remote:
        return ""
    head = recorded_head()
    if head is None or not head.started_by_dlrun:
        return ""
    return (f"the local Ray head stays up for the next job and its dashboard ({head.dashboard_url}); "
            "`dlrun down` stops it")


def _interrupted_summary(since: float) -> str:
    """What Ctrl-C or SIGTERM ended: the job this process ran (recorded CANCELLED, with what was torn down)."""
    from orchestrator.cli.render.summary import result_line
    from orchestrator.state.db import default_store

    store = default_store()
    job = store.job_run_by(os.getpid(), since=since - 1)
    if job is None:
        return "nothing was started"
    return result_line(store, job.id)


def _print_plan(plan) -> None:
    if plan is None:
        return
    try:
        from orchestrator.cli.plan import print_plan
    except ImportError:
        return
    print_plan(plan)


@cli.command()
@click.argument("job_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--all", "show_all", is_flag=True, help="more than the last 20 jobs")
def status(job_id, as_json, show_all):
    """The jobs (or one job with its history), with accrued cost."""
    from orchestrator.cli import status as st
    from orchestrator.runs.reconcile import reconcile
    from orchestrator.state.db import default_store

    for line in reconcile(default_store()):  # jobs whose supervisor died are picked up again
        click.echo(line, err=True)
    if job_id:
        st.show_job(job_id, as_json=as_json)
    else:
        st.show_jobs(limit=1000 if show_all else 20, as_json=as_json)


@cli.command()
@click.argument("job_id")
@click.option("-f", "--follow", is_flag=True, help="keep printing until the job ends; exit with its code")
@click.option("--raw", is_flag=True, help="the log as written, protocol and Ray lines included")
def logs(job_id, follow, raw):
    """The job's output, its progress lines rendered (the copy dlrun keeps as the job runs)."""
    from orchestrator.cli import status as st

    sys.exit(st.print_logs(job_id, follow=follow, raw=raw))


@cli.command()
@click.argument("job_id")
def cancel(job_id):
    """Stop a job and tear down its cluster."""
    from orchestrator.cli import status as st

    click.echo(st.cancel(job_id))


@cli.command()
@click.argument("cluster_id", required=False)
@click.option("--orphans", is_flag=True, help="also remove your dlrun-tagged cloud resources no live job owns")
@click.option("--all-owners", is_flag=True, help="with --orphans: every owner's, not only yours")
@click.option("--yes", "-y", is_flag=True, help="remove orphans without asking")
def down(cluster_id, orphans, all_owners, yes):
    """Stop the local Ray head dlrun started (only it), or one cluster, or orphans."""
    from orchestrator.runs import teardown

    def confirm(lines: list[str]) -> bool:
        if yes:
            return True
        click.echo("dlrun down --orphans would remove:\n  " + "\n  ".join(lines))
        if not sys.stdin.isatty():
            raise UsageError("--orphans: not removing anything without a terminal to ask; add --yes")
        return click.confirm("remove these?", default=False)

    for line in teardown.down(cluster_id=cluster_id, orphans=orphans, all_owners=all_owners, confirm=confirm):
        click.echo(line)


@cli.command()
def schema():
    """Print the job file's JSON Schema (for editors)."""
    import json

    from orchestrator.planning.spec import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


def main(argv=None) -> None:
    try:
        _main(argv)
    finally:
        if argv is None:  # the process ends here: skip its last full garbage collection (a quarter of a
            import gc     # second over the objects of pydantic, rich and the like); nothing needs it

            gc.freeze()


def _main(argv=None) -> None:
    try:
        cli.main(args=argv, prog_name="dlrun", standalone_mode=False)
    except DlrunError as e:
        click.echo(f"dlrun: error: {e.message}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort as e:  # click's form of Ctrl-C: the KeyboardInterrupt is its cause
        _interrupted(e.__cause__ if isinstance(e.__cause__, KeyboardInterrupt) else KeyboardInterrupt(), "")
    except KeyboardInterrupt as e:  # its message, when there is one, says what was cancelled and torn down
        _interrupted(e, "\n")
    except click.exceptions.NoArgsIsHelpError as e:  # `dlrun` alone: the help
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.UsageError as e:  # a flag or an argument: one line, as every other mistake
        click.echo(f"dlrun: error: {usage_line(e)}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.exceptions.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # a bug of dlrun's: one line here, the traceback in a file
        click.echo(f"dlrun: internal error: {type(e).__name__}: {e} (full traceback: {crash_report(e)})", err=True)
        sys.exit(EXIT_JOB_FAILED)


def usage_line(e: click.exceptions.UsageError) -> str:
    """Click's words for a bad flag or argument, without its usage block: what, and where the help is."""
    import re

    what = re.sub(r"^Invalid value for '([^']+)': ", r"\1: ", e.format_message().strip()).rstrip(".")
    return f"{what} (see `{e.ctx.command_path} --help`)" if e.ctx is not None else what


def _interrupted(e: KeyboardInterrupt, lead: str) -> None:
    """One line: Ctrl-C (exit 130) or SIGTERM (exit 143), and what was cancelled and torn down."""
    from orchestrator.runs.sigterm import Terminated

    terminated = isinstance(e, Terminated)
    why = str(e) if str(e) != "SIGTERM" else ""
    click.echo(f"{lead}dlrun: {'terminated (SIGTERM)' if terminated else 'interrupted'}{f': {why}' if why else ''}",
               err=True)
    sys.exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED)


def crash_report(e: BaseException) -> str:
    """Write the traceback of an unexpected exception under $DLRUN_HOME/crashes/; return the path."""
    import time
    import traceback

    from orchestrator.paths import dlrun_home

    try:
        d = dlrun_home() / "crashes"
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text("".join(traceback.format_exception(type(e), e, e.__traceback__)))
        return str(path)
    except OSError:
        return "could not be written"


if __name__ == "__main__":
    main()
