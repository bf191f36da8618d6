"""GCP quotas: every region's from regions.list (quotas[]: metric, limit, usage) and the project's from
projects.get (GPUS_ALL_REGIONS, CPUS_ALL_REGIONS), with google-cloud-compute's REST clients.

Limits and usage are what Compute Engine reports (cloud.google.com/compute/docs/reference/rest/v1/regions,
.../projects). Metrics regions.list does not report (H100, H200, B200 are managed in the Cloud Quotas
API as GPUS-PER-GPU-FAMILY-per-project-region) stay unknown. Throttling (429, or 403 rateLimitExceeded)
or a refused call makes what it would have read unknown, never 0.
"""
from __future__ import annotations

import time

from infra.refresh.cache import Unit
from infra.refresh.quotas import GLOBAL, Quota

SOURCE_REGIONS = "compute.regions.list"
SOURCE_PROJECT = "compute.projects.get"


def _why(e: BaseException) -> str:
    from google.api_core import exceptions as gexc

    text = str(e)
    reasons = {str(err.get("reason", "")) for err in (getattr(e, "errors", None) or []) if isinstance(err, dict)}
    if (isinstance(e, gexc.TooManyRequests) or reasons & {"rateLimitExceeded", "userRateLimitExceeded"}
            or "RATE_LIMIT_EXCEEDED" in text):
        return f"throttled ({getattr(e, 'code', 429)}): quotas unknown"
    if isinstance(e, (gexc.Forbidden, gexc.Unauthorized, gexc.NotFound)):
        return f"refused ({getattr(e, 'code', '')} {getattr(e, 'message', text)[:120]}): quotas unknown"
    return f"failed ({type(e).__name__}): quotas unknown"


def _rows(region: str, quotas, source: str) -> list[dict]:
    rows = []
    for q in quotas:
        metric = str(q.metric)
        unit = "GPU" if "GPUS" in metric else "CPU" if "CPUS" in metric else ""
        if metric.startswith("COMMITTED_"):
            continue
        if not unit:
            continue
        rows.append(Quota("gcp", region, metric, metric, unit, float(q.limit), float(q.usage),
                          "spot" if metric.startswith("PREEMPTIBLE_") else "", source).__dict__)
    return rows


def read_regions(clients, regions: list[str] | None = None) -> dict[str, Unit]:
    """region -> its quota unit (every region regions.list returns, or error units for `regions`)."""
    tried = time.time()
    try:
        found = list(clients.compute("RegionsClient").list(project=clients.project))
    except Exception as e:  # noqa: BLE001 — any failure: unknown, with the reason
        return {r: Unit("gcp", "quotas", r, error=_why(e), tried_at=tried) for r in regions or []}
    now = time.time()
    return {reg.name: Unit("gcp", "quotas", reg.name, fetched_at=now, source=SOURCE_REGIONS,
                           rows=_rows(reg.name, reg.quotas, SOURCE_REGIONS), tried_at=tried)
            for reg in found if not regions or reg.name in regions}


def read_project(clients) -> Unit:
    tried = time.time()
    try:
        project = clients.compute("ProjectsClient").get(project=clients.project)
    except Exception as e:  # noqa: BLE001
        return Unit("gcp", "quotas", GLOBAL, error=_why(e), tried_at=tried)
    return Unit("gcp", "quotas", GLOBAL, fetched_at=time.time(), source=SOURCE_PROJECT,
                rows=_rows(GLOBAL, project.quotas, SOURCE_PROJECT), tried_at=tried)
