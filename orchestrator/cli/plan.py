"""Click commands `dlrun plan` and `dlrun catalog [refresh]`, and run_plan() for `dlrun submit`."""
from __future__ import annotations

import json
import textwrap
from typing import TYPE_CHECKING

import click

from orchestrator.cli.params import BACKEND_METAVAR, USD, override_options
from orchestrator.cli.render.summary import plural
from orchestrator.errors import NothingFitsError

if TYPE_CHECKING:
    from infra.refresh.quotas import Quota, QuotaBook

# the clouds whose prices and quotas dlrun reads from their APIs (planning/catalog_refresh.py KINDS; the
# import is left to the commands, so that `dlrun plan --help` stays light)
CATALOG_CLOUDS = ("aws", "gcp")


def run_plan(spec, backend: str | None = None, *, blocked: frozenset[str] = frozenset(), store=None,
             offers=None, any_cloud: bool = False):
    """Plan a validated JobSpec over every backend it names; `backend` restricts to one. Quotas older than
    their lifetime (an hour) are read again; a launch re-reads them itself (executor.make_plan). A cloud
    without credentials is planned only to say so (planning/usable.py), unless `any_cloud`."""
    from orchestrator.planning.planner import plan_job, restrict
    from orchestrator.planning.usable import check_backend, unusable_backends

    check_backend(backend)
    if store is None:
        from orchestrator.state.db import Store

        store = Store()
    spec = restrict(spec, backend)
    unusable = unusable_backends(spec.resources.clouds)
    result = plan_job(spec, blocked=blocked, store=store, offers=offers, quota_max_age_s=None,
                      unusable=None if any_cloud else unusable)
    if any_cloud and unusable:
        result.notes.append(f"planned as if these had credentials: {', '.join(unusable)} (`dlrun check`; "
                            "`submit` leaves them out)")
    return result


def with_objective(spec, optimize: str | None):
    """--optimize cost|time over the job file's budget.optimize (kept with the job for re-plans)."""
    if optimize is None:
        return spec
    return spec.model_copy(update={"budget": spec.budget.model_copy(update={"optimize": optimize})})


def warm_profile(spec, stream=None) -> None:
    """Profile the job's model (or probe the job) now, saying so, where the plan would otherwise
    measure it in silence."""
    from orchestrator.cli.render.display import profiling_notice

    if spec.workload is None:
        if spec.reference is None:
            from orchestrator.planning.job_probe import PROBE_SECONDS, cached_probe, probe_job

            if cached_probe(spec) is None:
                if spec.image:  # the registry's answer (a mistyped tag, a login) before the job is said timed
                    from orchestrator.planning.image_check import probe_image

                    probe_image(spec)
                with profiling_notice(f"the job (until its rate is steady, {PROBE_SECONDS:.0f} s at most)", stream):
                    probe_job(spec)
        return
    from orchestrator.planning.isolated_profile import cached_in_workdir, measure_in_workdir
    from orchestrator.estimate.profile import cached_profile, measure

    own = bool(spec.run)  # the user's model, imported from the workdir
    if (cached_in_workdir(spec.workload, spec.workdir) if own else cached_profile(spec.workload)) is not None:
        return
    with profiling_notice(spec.workload.label.rpartition(":")[2] or spec.workload.label, stream):
        measure_in_workdir(spec.workload, spec.workdir) if own else measure(spec.workload)


# --- rendering -------------------------------------------------------------------------------------

def _console():
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=180)  # piped or captured: room for it all


def print_plan(plan, show_all: bool = False) -> None:
    from orchestrator.cli.render.plan_table import render_plan

    render_plan(plan, show_all=show_all)


# --- commands --------------------------------------------------------------------------------------

@click.command("plan")
@click.argument("job_file", type=click.Path(dir_okay=True))
@click.option("--max-cost", type=USD, default=None, help="budget in USD for the whole job")
@click.option("--deadline", default=None, help="wall-clock limit, e.g. 4h or 90m")
@click.option("--backend", default=None, metavar=BACKEND_METAVAR,
              help="plan for one backend only")
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="write est. hours vs est. $ for every candidate to this PNG")
@click.option("--all", "show_all", is_flag=True, help="show every candidate, not the best per GPU config")
@click.option("--optimize", type=click.Choice(["cost", "time"]), default=None,
              help="pick the cheapest (cost) or the fastest (time) candidate that fits")
@click.option("--any-cloud", is_flag=True,
              help="also choose among clouds without credentials here (to compare before setting one up)")
@override_options
def plan_command(job_file, max_cost, deadline, backend, as_json, plot_path, show_all, optimize, any_cloud, overrides):
    """Predict hours and dollars on every backend and pick the cheapest that fits."""
    from orchestrator.planning.overrides import with_overrides
    from orchestrator.planning.spec import load_job
    from orchestrator.planning.usable import check_backend, require_usable
    from orchestrator.planning.workload_check import check_workload

    spec = with_objective(with_overrides(load_job(job_file, max_cost=max_cost, deadline=deadline), overrides),
                          optimize)
    check_backend(backend) if any_cloud else require_usable(spec, backend)  # before profiling: exit 2, 4
    check_workload(spec, job_file)
    warm_profile(spec)
    result = run_plan(spec, backend, any_cloud=any_cloud)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        print_plan(result, show_all=show_all)
    if plot_path:
        from orchestrator.cli.render.plot import plot_plan

        click.echo(f"plot written to {plot_plan(result, plot_path)}", err=as_json)
    if result.chosen is None and result.credentials_needed:
        from orchestrator.planning.usable import credentials_error

        raise credentials_error(spec.name, result.unusable, result.credentials_needed)
    if result.chosen is None:
        raise NothingFitsError(result.nothing_fits_message(), plan=result)


@click.group("catalog", invoke_without_command=True)
@click.option("--gpu", default=None, help="only offers with this GPU (e.g. T4)")
@click.option("--cloud", type=click.Choice(CATALOG_CLOUDS), default=None)
@click.option("--region", default=None)
@click.pass_context
def catalog_group(ctx, gpu, cloud, region):
    """List the offers of the catalog (prices with their dates)."""
    if ctx.invoked_subcommand is not None:
        return
    from infra.catalog import load_offers
    from orchestrator.cli.catalog_filters import (catalog_table, filters_text, gpu_key, known_gpu, known_region,
                                                  not_offered)

    all_offers = load_offers()
    want, count = known_gpu(gpu, all_offers) if gpu else (None, None)
    if region:
        known_region(region, cloud, all_offers)

    def has_gpu(o) -> bool:
        return want is None or (bool(o.accelerator) and gpu_key(o.accelerator) == want
                                and (count is None or o.accelerator_count == count))

    offers = [o for o in all_offers if (cloud is None or o.cloud == cloud) and has_gpu(o)
              and (region is None or o.region == region)]
    if not offers:  # each filter is known, their combination is not offered: say where it is
        where = sorted({f"{o.cloud} {o.region}" for o in all_offers if has_gpu(o)})
        offered = not_offered(gpu, want, count, all_offers, has_gpu) if want else f"offers are in: {', '.join(where)}"
        click.echo(f"no catalog offer has {filters_text(gpu if want else None, cloud, region)}; {offered}", err=True)
        return
    console = _console()
    table, footer = catalog_table(offers, console.width)
    console.print(table)
    for line in footer:
        click.echo(textwrap.fill(line, console.width, subsequent_indent="  "))


@catalog_group.command("refresh")
@click.option("--cloud", "clouds", type=click.Choice(CATALOG_CLOUDS), multiple=True, help="default: both")
@click.option("--region", "regions", multiple=True, help="AWS region(s); default: every region the account has enabled")
@click.option("--stale-only", is_flag=True, help="fetch only what is older than its lifetime (what a plan does)")
@click.option("--json", "as_json", is_flag=True, help="print each source's outcome as JSON")
def catalog_refresh_command(clouds, regions, stale_only, as_json):
    """Read prices, offers and GPU types from the clouds' own APIs (every source in parallel, each within
    DLRUN_REFRESH_DEADLINE_S; a source that fails keeps what it had and says so). Exit 0: nothing failed;
    6: some sources failed, others were refreshed; 7: nothing was refreshed; 4: the clouds refused the
    credentials (or none are configured)."""
    from orchestrator.planning.catalog_refresh import refresh_catalog
    from infra.catalog import refreshed_offers_path

    clouds = tuple(clouds) or CATALOG_CLOUDS
    report = refresh_catalog(clouds, list(regions) or None,
                             max_age=None if stale_only else {}, progress=lambda line: click.echo(line, err=True))
    for cloud, why in report.skipped.items():
        click.echo(f"{cloud}: not refreshed: {why}", err=True)
    for r in report.failed:
        click.echo(r.line(), err=True)
    regions_text = ", ".join(f"{c} {n} regions" for c, n in report.regions.items() if n)
    summary = (f"{plural(len(report.fetched), 'source')} fetched, {len(report.failed)} failed in "
               f"{report.seconds:.1f} s: {plural(report.offers, 'offer')} ({regions_text or 'none'}) in "
               f"{refreshed_offers_path()}")
    if as_json:
        click.echo(json.dumps(_refresh_json(report), indent=2))
    click.echo(summary, err=as_json)
    _refresh_exit(report, clouds)


def _refresh_json(report) -> dict:
    from orchestrator.cli.render.summary import iso_time

    return {"outcome": report.outcome if report.results or not report.skipped else "skipped",
            "sources": [{"cloud": r.cloud, "kind": r.kind, "region": r.region, "ok": r.ok, "status": r.status,
                         "rows": r.rows, "error": r.error or None, "fetched_at": iso_time(r.fetched_at or None)}
                        for r in report.results],
            "skipped": report.skipped, "offers": report.offers, "seconds": round(report.seconds, 2)}


def _refresh_exit(report, clouds) -> None:
    """The exit code of a refresh (README's table): a cloud without credentials counts only when every cloud
    asked for has none."""
    from orchestrator.errors import CloudCredentialsError, RefreshFailedError, RefreshPartialError

    if len(report.skipped) == len(clouds):
        raise CloudCredentialsError("nothing refreshed: " + "; ".join(f"{c}: {w}" for c, w in report.skipped.items()))
    failed = len(report.failed)
    kept = "their previous rows are kept (see the lines above)"
    if report.outcome == "partial":
        raise RefreshPartialError(f"catalog refresh: {plural(failed, 'source')} of "
                                  f"{failed + len(report.fetched)} failed; {kept}")
    if report.outcome == "refused":
        raise CloudCredentialsError(f"catalog refresh: nothing refreshed, the cloud refused the credentials of "
                                    f"{plural(failed, 'source')} ({report.failed[0].error}); {kept}")
    if report.outcome == "nothing":
        raise RefreshFailedError(f"catalog refresh: nothing refreshed, {plural(failed, 'source')} failed; {kept}")


@catalog_group.command("quotas")
@click.option("--cloud", type=click.Choice(CATALOG_CLOUDS), default=None)
@click.option("--region", "regions", multiple=True, help="region(s); default: every region of the catalog's offers")
@click.option("--all", "show_all", is_flag=True,
              help="also quotas with room to spare (default: GPU quotas and full ones)")
@click.option("--json", "as_json", is_flag=True)
def catalog_quotas_command(cloud, regions, show_all, as_json):
    """This account's quotas that decide what dlrun can launch (read now when older than an hour)."""
    from orchestrator.planning.catalog_refresh import COMMAND_DEADLINE, quota_book

    book = quota_book(_quota_regions(cloud, regions), progress=lambda line: click.echo(line, err=True),
                      deadline=COMMAND_DEADLINE)
    quotas = _shown_quotas(book, regions, show_all)
    if as_json:
        click.echo(_quotas_json(book, quotas))
    else:
        _print_quota_table(quotas)
        _print_quota_reads(book)
    _quotas_exit(book, cloud)


def _quotas_exit(book: QuotaBook, cloud: str | None) -> None:
    """The exit code of `catalog quotas`, as a refresh's (README's table): 6 when some reads failed (what was
    read before is shown, or unknown), 7 when every read failed, 4 when the cloud refused every one or no
    cloud asked for has credentials."""
    from orchestrator.errors import CloudCredentialsError, RefreshFailedError, RefreshPartialError
    from infra.refresh.answers import is_refusal

    asked = [cloud] if cloud else list(CATALOG_CLOUDS)
    if book.unchecked and not book.read_now and all(c in book.unchecked for c in asked):
        raise CloudCredentialsError("catalog quotas: nothing read: " +
                                    "; ".join(f"{c}: {w}" for c, w in book.unchecked.items()))
    failed = [book.units[k] for k in sorted(book.read_now) if book.units[k].error]
    if not failed:
        return
    shown = "what was read before is shown with its age, the rest as unknown (see the lines above)"
    if len(failed) < len(book.read_now):
        raise RefreshPartialError(f"catalog quotas: {len(failed)} of {len(book.read_now)} reads failed; {shown}")
    if all(is_refusal(u.error) for u in failed):
        raise CloudCredentialsError(f"catalog quotas: nothing read, the cloud refused the credentials "
                                    f"({failed[0].error}); {shown}")
    raise RefreshFailedError(f"catalog quotas: nothing read, {plural(len(failed), 'read')} failed; {shown}")


def _quota_regions(cloud: str | None, regions: tuple[str, ...]) -> dict[str, set[str]]:
    """cloud -> the regions whose quotas to read: those asked for, else every region of the catalog's offers."""
    from infra.catalog import load_offers

    wanted: dict[str, set[str]] = {c: set() for c in ([cloud] if cloud else CATALOG_CLOUDS)}
    offers = load_offers()
    from orchestrator.cli.catalog_filters import known_region

    for r in regions:
        known_region(r, cloud, offers)
    for o in offers:
        if o.cloud in wanted and (not regions or o.region in regions):
            wanted[o.cloud].add(o.region)
    return wanted


def _shown_quotas(book: QuotaBook, regions: tuple[str, ...], show_all: bool) -> list[Quota]:
    """The quotas to show, by cloud and region (project-wide first); without --all only those that decide a
    launch: GPU, per-market and CPU quotas, and full ones."""
    quotas = sorted(book.all_quotas(), key=lambda q: (q.cloud, q.region != "global", q.region, q.code))
    if regions:
        quotas = [q for q in quotas if q.region in regions or q.region == "global"]
    if not show_all:
        quotas = [q for q in quotas if q.unit == "GPU" or q.market or (q.free is not None and q.free <= 0)
                  or q.code in ("CPUS", "CPUS_ALL_REGIONS")]
    return quotas


def _quotas_json(book: QuotaBook, quotas: list[Quota]) -> str:
    from orchestrator.cli.render.summary import iso_time

    units = [{"cloud": u.cloud, "region": u.region, "fetched_at": iso_time(u.fetched_at or None), "source": u.source,
              "error": u.error or None} for u in book.units.values()]
    return json.dumps({"quotas": [q.__dict__ for q in quotas], "units": units, "unchecked": book.unchecked},
                      indent=2)


def _print_quota_table(quotas: list[Quota]) -> None:
    from rich.table import Table

    table = Table(title=f"quotas: {plural(len(quotas), 'quota')}")
    for col in ("cloud", "region", "quota", "name", "market", "limit", "in use", "free"):
        table.add_column(col, justify="right" if col in ("limit", "in use", "free") else "left")
    for q in quotas:
        free = "unknown" if q.free is None else f"{q.free:g} {q.unit}"
        table.add_row(q.cloud, q.where(), q.code, q.name if q.name != q.code else "", q.market or "both",
                      "unknown" if q.limit is None else f"{q.limit:g}", "?" if q.usage is None else f"{q.usage:g}",
                      free, style="red" if q.free is not None and q.free <= 0 else None)
    _console().print(table)


def _print_quota_reads(book: QuotaBook) -> None:
    """Which clouds' quotas were not read, which reads failed, and how old what is shown is."""
    from infra.refresh.cache import age_words

    for c, why in book.unchecked.items():
        click.echo(f"{c}: quotas not read: {why}")
    for u in sorted(book.units.values(), key=lambda u: (u.cloud, u.region)):
        if u.error:
            kept = f"; showing what was read {age_words(u.age_s())} ago" if u.fetched_at else ""
            click.echo(f"{u.cloud} {u.region}: {u.error}{kept}")
    ages = [u.age_s() for u in book.units.values() if u.fetched_at]
    if ages:
        click.echo(f"read {age_words(min(ages))} to {age_words(max(ages))} ago (cached for an hour; "
                   "a launch reads them again)")
