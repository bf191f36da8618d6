"""What a plan reads besides the job: the account's quotas, prices past their lifetime (read again before
choosing), and the notes that say which quotas keep offers out and where the chosen price came from.
planner.plan_job calls these; planner.plan stays a pure function of (spec, offers, quotas).
"""
from __future__ import annotations

from infra import capabilities


def quota_notes(candidates: list, chosen, quotas, nodes: int,
                notes: list[str], better=None) -> list[str]:
    """Notes on quotas (which to raise for better offers, which are not known); returns the quotas to raise
    that would let in a candidate better than the chosen one (every quota-excluded one when none is)."""
    from infra.refresh.quotas import raise_hint

    better = better or (lambda c: (c.estimate.cost, c.estimate.hours, c.offer.key, c.spot))
    groups: dict[tuple[str, str], dict] = {}  # (cloud, code) -> the quota's words and where it is short
    for c in sorted(candidates, key=better):
        if chosen is not None and better(c) >= better(chosen):
            break
        if c.reason and c.reason.startswith("quota: "):
            for q in quotas.blocking_quotas(c.offer, c.spot, nodes):
                g = groups.setdefault((q.cloud, q.code), {"q": q, "where": {}})
                g["where"].setdefault(q.where(), f"limit {q.limit:g}, in use {q.usage or 0:g}")
    raise_these = []
    for (cloud, code), g in groups.items():
        name = f" ({g['q'].name})" if g["q"].name != code else ""
        where = "; ".join(f"{w}: {v}" for w, v in list(g["where"].items())[:3])
        more = f"; +{len(g['where']) - 3} more regions" if len(g["where"]) > 3 else ""
        raise_these.append(f"{cloud} {code}{name} [{where}{more}]")
    if raise_these and chosen is not None:
        clouds = sorted({cloud for cloud, _ in groups})
        notes.append(f"quotas keep better offers out: raise {'; '.join(raise_these[:4])}"
                     f"{' …' if len(raise_these) > 4 else ''} ({'; '.join(raise_hint(c) for c in clouds)})")
    unknown: dict[str, int] = {}
    for c in candidates:
        if c.eligible and has_quotas(c.offer.cloud):
            for why in quotas.unknown(c.offer, c.spot, nodes):
                unknown[why] = unknown.get(why, 0) + 1
    if unknown:
        top = sorted(unknown, key=lambda w: -unknown[w])[:3]
        notes.append("quotas not known for some offers (kept in the plan; a launch may still meet the quota): "
                     + "; ".join(top) + (f"; and {len(unknown) - 3} more" if len(unknown) > 3 else ""))
    return raise_these



def stderr_line(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


def has_quotas(cloud: str) -> bool:
    """Whether the account's quotas bound this backend: a cloud that bills per region (this machine is not
    billed; a team cluster is billed but has no regions, nor quotas)."""
    caps = capabilities(cloud)
    return caps.billed and caps.regional


def quotas_for(spec, offers: list, max_age_s: float | None, progress=None):
    """The QuotaBook of the regions the spec may use (orchestrator/planning/catalog_refresh.quota_book)."""
    from orchestrator.planning.catalog_refresh import quota_book

    res = spec.resources
    regions: dict[str, set[str]] = {}
    for o in offers:
        if has_quotas(o.cloud) and (not res.regions or o.region in res.regions):
            regions.setdefault(o.cloud, set()).add(o.region)
    return quota_book(regions, max_age_s=max_age_s, progress=progress)


REFRESH_ENV = "DLRUN_CATALOG_REFRESH"  # "off": a plan never reads prices from the clouds by itself


def refresh_stale(clouds, progress) -> list[str]:
    """Before choosing: for each cloud dlrun has refreshed before, fetch what is past its lifetime (specs a
    week, on-demand prices and offerings a day, spot prices an hour), with a progress line, or say why not.
    A cloud never refreshed keeps the shipped snapshot (`dlrun catalog refresh` reads it the first time).
    Each source gets DLRUN_PLAN_REFRESH_DEADLINE_S (a few seconds); one that fails or runs out of time keeps its
    cached rows and is named in a note. Returns notes; the first is "refreshed" when the offers changed."""
    from orchestrator.planning.catalog_refresh import PLAN_DEADLINE, refresh_catalog, stale_refreshed
    from orchestrator.settings import env_str

    if env_str(REFRESH_ENV).lower() in ("off", "0", "no", "false"):
        return []
    stale, regions = stale_refreshed(clouds)
    if not stale:
        return []
    report = refresh_catalog(stale, regions or None, progress=progress, deadline=PLAN_DEADLINE)
    notes = ["refreshed"]
    for cloud, why in report.skipped.items():
        notes.append(f"{cloud} prices are past their lifetime and were not refreshed: {why}")
    if report.failed:
        notes.append(f"refresh: {len(report.failed)} source(s) failed, planned with their cached rows "
                     f"(e.g. {report.failed[0].line()})")
    return notes


def price_source_note(result) -> str | None:
    """Where the chosen price came from and how old it is; how many candidates priced from the snapshot."""
    import time

    from infra.refresh.cache import age_words

    c = result.chosen
    if c is None or not capabilities(c.offer.cloud).provisioned:  # this machine; a team cluster's own rate
        return None
    o = c.offer
    fetched = (o.extra.get("spot_fetched_at") if c.spot else o.extra.get("fetched_at")) if o.extra else None
    if fetched:
        source = o.extra.get("spot_source") if c.spot else o.source.split(" fetched ")[0]
        line = f"price of the choice: {source}, fetched {age_words(time.time() - fetched)} ago"
    else:
        date = o.spot_price_date if c.spot else o.price_date
        line = f"price of the choice: the shipped snapshot ({o.source or 'configs/catalog'}, dated {date}); " \
               "`dlrun catalog refresh` reads today's from the clouds"
    priced = [x for x in result.candidates if x.eligible and capabilities(x.offer.cloud).provisioned]
    snap = sum(1 for x in priced if not x.offer.extra.get("fetched_at"))
    live = sum(1 for x in priced if x.offer.extra.get("fetched_at"))
    if snap and live:
        line += f" ({live} candidates priced from the clouds' APIs, {snap} from the snapshot)"
    return line


# --- team clusters (infra/ray_cluster) ----------------------------------------------------------------

def offers_with_clusters(spec, problems: list[str]) -> list:
    """Every backend's offers (infra.offers_for) plus, on a team cluster, an offer for each GPU count the job
    wishes that no node there holds (planned only to say why it is out); a cluster the job names that is not
    in config.yaml is the job's mistake (exit 2)."""
    from infra import offers_for
    from infra.ray_cluster.offers import wished_offer
    from infra.ray_cluster.settings import ClusterConfigError, UnknownClusterError
    from orchestrator.errors import SpecError, UsageError

    try:
        offers = offers_for(spec.resources.clouds, problems)
    except UnknownClusterError as e:
        raise SpecError(f"{spec.name}: resources.clouds: {e}") from None
    except ClusterConfigError as e:  # config.yaml's own mistake, named there
        raise UsageError(str(e)) from None
    wished = [(w.name, w.count) for w in spec.resources.accelerator_wishes or ()]
    extra = []
    for o in offers:
        if o.extra.get("cluster") and o.accelerator and o.accelerator_count == 1:
            for name, count in wished:
                if name.upper() == o.accelerator.upper() and not any(
                        x.cloud == o.cloud and x.accelerator == o.accelerator and x.accelerator_count == count
                        for x in offers + extra):
                    extra.append(wished_offer(o, count))
    return offers + extra


def cluster_wait(offer, nodes: int) -> str | None:
    if not offer.extra.get("cluster"):
        return None
    from infra.ray_cluster.offers import wait_note

    return wait_note(offer, nodes)


def cluster_notes(chosen) -> list[str]:
    """The chosen team cluster: its internal rate, and whether the job waits for busy GPUs there."""
    if chosen is None or not chosen.offer.extra.get("cluster"):
        return []
    o = chosen.offer
    line = f"{o.cloud}: the team's Ray cluster at its internal rate (${o.price_per_hour:g}/h for this job)"
    return [line + (f"; it {chosen.wait} now (the job starts when they are free)" if chosen.wait else "")]
