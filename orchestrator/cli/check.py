"""`dlrun check`: which backends can run a job, what is missing on the others and the command that fixes it."""
from __future__ import annotations

import json
import textwrap

import click

from infra import BACKEND_NAMES

WIDTH = 80
LABEL = 14  # the width of a field's name ("credentials", "regions", ...)


@click.command("check")
@click.option("--cloud", type=click.Choice(BACKEND_NAMES), default=None,
              help="check this backend only (default: every cloud, team clusters, and this machine)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
def check_command(cloud, as_json):
    """Which backends can run a job: credentials, account, regions, GPU quotas; what fixes the rest.

    For each cloud: where its credentials come from (environment, ~/.aws, application default
    credentials, ...), the account or project they are, the regions they reach and the GPU quotas in
    those with GPU offers, or what is missing and the command that fixes it. This machine (the local
    backend) is noted; a team cluster of config.yaml is asked what it has. Only clouds that have
    credentials are called.

    \b
    Exit 0: a cloud or a team cluster (or the backend --cloud names) can run a job.
    Exit 4: none can (`--backend local` still runs jobs on this machine).
    """
    from orchestrator.errors import CloudCredentialsError
    from orchestrator.planning.account_check import check_backends

    report = check_backends([cloud] if cloud else None, progress=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        click.echo("\n".join(report_lines(report)))
    if not report.usable():
        noted = [o for o in report.others if o.usable and not o.counts]
        local = f"; `--backend {noted[0].name}` runs jobs on this machine" if noted else ""
        what = f"{cloud} is not usable" if cloud else "no cloud is usable"
        raise CloudCredentialsError(f"{what} (the fixes are above){local}")


def report_lines(report) -> list[str]:
    lines: list[str] = []
    for c in report.clouds:
        lines += _cloud_lines(c) + [""]
    for o in report.others:
        lines += _wrap(f"{o.name}: {'usable' if o.usable else 'not usable'} — {o.line}", "  ") + [""]
    usable = report.usable()
    noted = [o.name for o in report.others if o.usable and not o.counts]
    also = f" (and {', '.join(noted)}: this machine)" if noted else ""
    lines.append(f"usable: {', '.join(usable)}{also}" if usable else
                 f"usable: no cloud{f'; only {noted[0]} (this machine)' if noted else ''}")
    return lines


def _cloud_lines(c) -> list[str]:
    login, account = c.login, c.account
    if not c.usable:
        why = login.missing if not login.usable else _kind(account.error if account is not None else "")
        out = _wrap(f"{c.cloud}: not usable — {why}", "  ")
        if login.source:
            out += _field("credentials", login.source)
        if account is not None and account.error:
            out += _field("error", account.error)
        out += _field("fix", login.fix if not login.usable else _refused_fix(c))
        return out
    assert account is not None  # usable: the account answered
    out = _wrap(f"{c.cloud}: usable — {account.identity}", "  ")
    out += _field("credentials", login.source)
    if login.region:
        out += _field("region", f"{login.region} (the default configured)")
    gpu = c.gpu_regions
    reached = f"{len(account.regions)} reached" + (f" ({len(account.down)} down)" if account.down else "")
    listed = f"{len(gpu)}" + (f" ({', '.join(gpu)})" if gpu else "")
    offered = f"with GPU offers in the catalog: {listed}"
    if account.regions_error:
        reached, offered = f"not listed ({account.regions_error})", f"the catalog's with GPU offers: {listed}"
    out += _field("regions", f"{reached}; {offered}")
    out += _quota_lines(c)
    return out


def _kind(error: str) -> str:
    """The kind a failed read opens with (infra/refresh/answers.py): refused, timed out, throttled, ..."""
    from infra.refresh.answers import is_refusal

    return "refused" if is_refusal(error) else error.split(" (")[0].split(":")[0] or "not reached"


def _refused_fix(c) -> str:
    from infra.refresh.answers import is_refusal

    if c.account is not None and not is_refusal(c.account.error):
        return "check this machine's network (or the cloud's status) and run `dlrun check` again"
    return f"log in again: {c.login.fix}"


def _quota_lines(c) -> list[str]:
    from infra.refresh.quotas import short_label

    if not c.gpu_regions:
        return []
    out = _field("GPU quotas", "limit, on-demand (spot)" + (", in vCPUs" if any(q.unit == "vCPU" for q in c.quotas)
                                                             else "") + "; read now")
    by_region: dict[str, dict[str, dict[str, str]]] = {}
    for q in c.quotas:
        cell = by_region.setdefault(q.where(), {}).setdefault(short_label(q), {})
        cell["spot" if q.market == "spot" else "od"] = _amount(q)
    for region, cells in by_region.items():
        items = [f"{label} {v.get('od', '-')}" + (f" ({v['spot']})" if "spot" in v else "")
                 for label, v in sorted(cells.items())]
        out += _wrap(f"{region:<{LABEL}} " + " · ".join(items), " " * (LABEL + 5), indent="    ")
    for e in c.quota_errors:
        out += _wrap(f"not read: {e}", " " * 6, indent="    ")
    if c.gpu_room is False:
        out += _wrap(f"no GPU quota has room: {c.raise_hint}", "    ", indent="  ")
    return out


def _amount(q) -> str:
    if q.limit is None:
        return "?"
    if q.usage:
        return f"{q.free:g} of {q.limit:g} free"
    return f"{q.limit:g}"


def _field(name: str, text: str) -> list[str]:
    return _wrap(f"{name:<{LABEL}}{text}", " " * (LABEL + 2), indent="  ")


def _wrap(text: str, rest: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=rest, break_on_hyphens=False,
                         break_long_words=False) or [indent]
