"""A fake of the Compute Engine REST calls dlrun reads prices, offers and quotas with, for the real
google-cloud-compute client (AnonymousCredentials + client_options api_endpoint + transport="rest"):

    regions.list              GET /compute/v1/projects/P/regions
    projects.get              GET /compute/v1/projects/P
    acceleratorTypes.aggregatedList  GET /compute/v1/projects/P/aggregated/acceleratorTypes
    machineTypes.aggregatedList      GET /compute/v1/projects/P/aggregated/machineTypes

Reproduced (shapes from cloud.google.com/compute/docs/reference/rest/v1: regions/list, projects/get,
acceleratorTypes/aggregatedList, machineTypes/aggregatedList):
- pagination by maxResults (default and maximum 500) and pageToken/nextPageToken; aggregated lists keyed
  "zones/<zone>", a zone with nothing in it answered with warning NO_RESULTS_ON_PAGE instead of items;
- regions' quotas[] {metric, limit, usage}: a region without GPUs (no NVIDIA_* metrics), a quota of 0,
  metrics regions.list never reports (NVIDIA_H100_GPUS: Google manages H100/H200/B200 in the Cloud
  Quotas API), a new project's GPUS_ALL_REGIONS = 0;
- machineTypes' accelerators[] {guestAcceleratorType, guestAcceleratorCount} for a2/a3/g2, the
  `name eq "(a2|g2|n1)-.*"` style filter (RE2 full match on name), acceleratorTypes'
  maximumCardsPerInstance;
- throttling: throttle(kind, n) answers the next n calls of that kind with 403 rateLimitExceeded (GCE's
  per-minute API rate limit, cloud.google.com/compute/api-quota) and too_many(kind, n) with 429.
Not reproduced: authentication, fields dlrun does not read, deprecation status, zones' own endpoints.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlparse

from tests.support.http import LocalHttpServer, QuietHandler

MAX_RESULTS = 500
BASE = "https://www.googleapis.com/compute/v1/projects"


@dataclass
class Region:
    name: str
    zones: list[str]
    quotas: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (limit, usage)


@dataclass
class GceCatalog(LocalHttpServer):
    project: str = "dlrun-test"
    regions: dict[str, Region] = field(default_factory=dict)
    project_quotas: dict[str, tuple[float, float]] = field(default_factory=dict)
    accelerators: dict[str, list[dict]] = field(default_factory=dict)   # zone -> acceleratorType items
    machine_types: dict[str, list[dict]] = field(default_factory=dict)  # zone -> machineType items
    calls: list[str] = field(default_factory=list)
    page_cap: int = MAX_RESULTS  # lower it to make a list span pages
    _faults: dict[str, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        LocalHttpServer.__init__(self, None)

    def make_handler(self):
        return _handler_for(self)

    # ---- faults
    def throttle(self, kind: str, times: int = 1) -> None:
        """The next `times` calls of kind (regions, project, acceleratorTypes, machineTypes): 403 rateLimitExceeded."""
        self._faults.setdefault(kind, []).extend([403] * times)

    def too_many(self, kind: str, times: int = 1) -> None:
        self._faults.setdefault(kind, []).extend([429] * times)

    # ---- building the account
    def add_region(self, name: str, zones: int | list[str] = 3, **quotas: tuple[float, float]) -> Region:
        zs = zones if isinstance(zones, list) else [f"{name}-{c}" for c in "abcdef"[:zones]]
        r = self.regions[name] = Region(name, zs, dict(quotas))
        return r

    def add_accelerator(self, zone: str, name: str, max_cards: int) -> None:
        self.accelerators.setdefault(zone, []).append({
            "kind": "compute#acceleratorType", "name": name, "description": name.upper(),
            "zone": f"{BASE}/{self.project}/zones/{zone}", "maximumCardsPerInstance": max_cards,
            "selfLink": f"{BASE}/{self.project}/zones/{zone}/acceleratorTypes/{name}"})

    def add_machine_type(self, zone: str, name: str, cpus: int, memory_mb: int,
                         accelerator: tuple[str, int] | None = None) -> None:
        item = {"kind": "compute#machineType", "name": name, "description": name, "guestCpus": cpus,
                "memoryMb": memory_mb, "zone": zone, "isSharedCpu": False}
        if accelerator:
            item["accelerators"] = [{"guestAcceleratorType": accelerator[0], "guestAcceleratorCount": accelerator[1]}]
        self.machine_types.setdefault(zone, []).append(item)

    # ---- serving
    def handle(self, path: str, query: dict) -> tuple[int, dict]:
        prefix = f"/compute/v1/projects/{self.project}"
        if not path.startswith(prefix):
            return 404, _error(404, f"The resource '{path}' was not found", "notFound")
        rest = path[len(prefix):]
        kind = {"": "project", "/regions": "regions", "/aggregated/acceleratorTypes": "acceleratorTypes",
                "/aggregated/machineTypes": "machineTypes"}.get(rest)
        if kind is None:
            return 404, _error(404, f"The resource '{path}' was not found", "notFound")
        with self._lock:
            self.calls.append(kind)
            fault = self._faults.get(kind, []).pop(0) if self._faults.get(kind) else None
        if fault == 403:
            return 403, _error(403, "Rate Limit Exceeded", "rateLimitExceeded")
        if fault == 429:
            return 429, _error(429, "Quota exceeded for quota metric 'Queries' of service 'compute.googleapis.com'",
                               "rateLimitExceeded")
        if kind == "project":
            return 200, {"kind": "compute#project", "name": self.project, "id": "1234567890",
                         "quotas": _quotas(self.project_quotas),
                         "commonInstanceMetadata": {"kind": "compute#metadata", "items": []}}
        size = min(int((query.get("maxResults") or [MAX_RESULTS])[0]), self.page_cap)
        start = int((query.get("pageToken") or ["0"])[0] or 0)
        if kind == "regions":
            items = [{"kind": "compute#region", "name": r.name, "status": "UP",
                      "selfLink": f"{BASE}/{self.project}/regions/{r.name}",
                      "zones": [f"{BASE}/{self.project}/zones/{z}" for z in r.zones],
                      "quotas": _quotas(r.quotas)} for r in self.regions.values()]
            page = items[start:start + size]
            out = {"kind": "compute#regionList", "items": page}
            if start + size < len(items):
                out["nextPageToken"] = str(start + size)
            return 200, out
        table = self.accelerators if kind == "acceleratorTypes" else self.machine_types
        key = "acceleratorTypes" if kind == "acceleratorTypes" else "machineTypes"
        pattern = _name_filter((query.get("filter") or [""])[0])
        flat = [(z, item) for r in self.regions.values() for z in r.zones for item in table.get(z, [])
                if pattern is None or pattern.fullmatch(item["name"])]
        page = flat[start:start + size]
        items: dict[str, dict] = {}
        for z, item in page:
            items.setdefault(f"zones/{z}", {key: []})[key].append(item)
        if start == 0:  # zones with nothing in them: GCE answers with a warning instead of items
            for r in self.regions.values():
                for z in r.zones:
                    items.setdefault(f"zones/{z}", {"warning": {
                        "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope "
                        f"'zones/{z}' on this page.", "data": [{"key": "scope", "value": f"zones/{z}"}]}})
        out = {"kind": f"compute#{key[:-1]}AggregatedList", "items": items}
        if start + size < len(flat):
            out["nextPageToken"] = str(start + size)
        return 200, out


def _name_filter(text: str):
    text = text.strip()
    if not text:
        return None
    m = re.fullmatch(r'\(?\s*name\s+eq\s+"?([^"]+?)"?\s*\)?', text)
    if not m:
        raise ValueError(f"unsupported filter {text!r}")
    return re.compile(m.group(1))


def _quotas(table: dict[str, tuple[float, float]]) -> list[dict]:
    return [{"metric": m, "limit": float(lim), "usage": float(use)} for m, (lim, use) in table.items()]


def _error(code: int, message: str, reason: str) -> dict:
    return {"error": {"code": code, "message": message,
                      "errors": [{"message": message, "domain": "usageLimits" if code in (403, 429) else "global",
                                  "reason": reason}]}}


def _handler_for(fake: GceCatalog):
    class Handler(QuietHandler):
        def do_GET(self):
            url = urlparse(self.path)
            try:
                status, payload = fake.handle(url.path, parse_qs(url.query))
            except ValueError as e:
                status, payload = 400, _error(400, str(e), "invalid")
            self.reply(status, json.dumps(payload).encode(), "application/json; charset=UTF-8")

    return Handler
