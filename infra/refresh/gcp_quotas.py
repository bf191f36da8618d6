"""GCP quotas: every region's from regions.list (quotas[]: metric, limit, usage) and the project's from
projects.get (GPUS_ALL_REGIONS, CPUS_ALL_REGIONS), with google-cloud-compute's REST clients.

Limits and usage are what Compute Engine reports (cloud.google.com/compute/docs/reference/rest/v1/regions,
.../projects). Metrics regions.list does not report (H100, H200, B200 are managed in the Cloud Quotas
API as GPUS-PER-GPU-FAMILY-per-project-region) stay unknown. Throttling (429, or 403 rateLimitExceeded),
a refused call or an answer that cannot be read or is not the list it should be (infra/refresh/answers.py)
makes what it would have read unknown (or keeps what was read before), never 0.
"""
from __future__ import annotations

from infra.refresh.answers import ShapeError
from infra.refresh.bounds import current_or_new, read_unit
from infra.refresh.cache import Unit
from infra.refresh.quotas import GLOBAL, Quota

SOURCE_REGIONS = "compute.regions.list"
SOURCE_PROJECT = "compute.projects.get"


def _rows(region: str, quotas, source: str) -> list[dict]:
    rows = []
    for q in quotas:
        metric = str(q.metric)
        unit = "GPU" if "GPUS" in metric else "CPU" if "CPUS" in metric else ""
        if metric.startswith("COMMITTED_"):
            continue
        if not unit:
            continue
        limit = float(q.limit) if "limit" in q else None  # a limit the answer leaves out is unknown, never 0
        rows.append(Quota("gcp", region, metric, metric, unit, limit, float(q.usage) if "usage" in q else None,
                          "spot" if metric.startswith("PREEMPTIBLE_") else "", source).__dict__)
    return rows


def read_regions(clients, regions: list[str] | None = None) -> dict[str, Unit]:
    """region -> its quota unit (every region regions.list returns, or error units for `regions`)."""
    from infra.refresh.gcp_prices import list_regions

    found: list = []

    def read() -> list:
        found.extend(list_regions(clients))
        for reg in found:
            _quota_shape(reg.quotas, f"compute.regions.list {reg.name}")
        return []

    unit = read_unit("gcp", "quotas", "", SOURCE_REGIONS, clients.deadline(), read)
    if unit.error:
        return {r: Unit("gcp", "quotas", r, error=unit.error, tried_at=unit.tried_at) for r in regions or []}
    return {reg.name: Unit("gcp", "quotas", reg.name, fetched_at=unit.fetched_at, source=SOURCE_REGIONS,
                           rows=_rows(reg.name, reg.quotas, SOURCE_REGIONS), tried_at=unit.tried_at)
            for reg in found if not regions or reg.name in regions}


def read_project(clients) -> Unit:
    def read() -> list[dict]:
        deadline = current_or_new(clients)
        project = clients.compute("ProjectsClient").get(project=clients.project, **clients.call(deadline))
        if project.kind != "compute#project":
            raise ShapeError(f"compute.projects.get answered {project.kind or 'no kind'!r}, not a compute#project")
        _quota_shape(project.quotas, "compute.projects.get")
        if not project.quotas:
            raise ShapeError("compute.projects.get answered a project without quotas")
        return _rows(GLOBAL, project.quotas, SOURCE_PROJECT)

    return read_unit("gcp", "quotas", GLOBAL, SOURCE_PROJECT, clients.deadline(), read)


def _quota_shape(quotas, what: str) -> None:
    for q in quotas:
        if not q.metric:
            raise ShapeError(f"{what} answered a quota without a metric")
