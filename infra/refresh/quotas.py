"""Which quotas an offer draws on, and whether this account can launch it now (limit - in use >= need).

AWS counts vCPUs per instance-class bucket (G and VT, P, Standard, ...), on-demand and spot apart, per
region (Service Quotas, ServiceCode ec2). GCP counts GPUs per type per region (NVIDIA_T4_GPUS, with
PREEMPTIBLE_* variants for Spot VMs), CPUs per region (CPUS, or a series' own N2_CPUS, C3_CPUS, ...), and
per project GPUS_ALL_REGIONS / CPUS_ALL_REGIONS (projects.get). A quota the API did not report (GCP's
H100/H200/B200 are absent from regions.list), a region whose read failed or was throttled, a cloud without
credentials: "unknown", which never excludes an offer (a launch may still meet the quota; the run loop
then blocks what draws on it, infra.base.QuotaScope). Only a known limit that is too small excludes.

Spot on GCP: where a region's PREEMPTIBLE_* limit is absent or 0, Spot VMs draw on the standard quota
(cloud.google.com/compute/resource-usage, "Preemptible quotas"), so a PREEMPTIBLE_* of 0 alone never
rules spot out.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from infra.refresh import cache

GLOBAL = "global"


@dataclass(frozen=True)
class Quota:
    cloud: str
    region: str            # "global" for a project-wide quota
    code: str              # AWS quota code (L-DB2E81BA) or GCP metric (NVIDIA_T4_GPUS)
    name: str              # the cloud's words for it
    unit: str              # vCPU | GPU | CPU
    limit: float | None    # None: not known
    usage: float | None = None
    market: str = ""       # on-demand | spot | "" (both)
    source: str = ""

    @property
    def free(self) -> float | None:
        return None if self.limit is None else self.limit - (self.usage or 0.0)

    def where(self) -> str:
        return "all regions" if self.region == GLOBAL else self.region

    def describe(self) -> str:
        name = f" ({self.name})" if self.name and self.name != self.code else ""
        used = "?" if self.usage is None else f"{self.usage:g}"
        limit = "unknown" if self.limit is None else f"{self.limit:g}"
        return f"{self.cloud} {self.code}{name} in {self.where()}: limit {limit}, in use {used}"


@dataclass(frozen=True)
class Demand:
    """What one market of one offer needs of one quota; quota None = not known (with why)."""

    cloud: str
    region: str
    code: str
    need: float
    unit: str
    quota: Quota | None
    unknown_why: str = ""

    @property
    def short(self) -> bool:
        return self.quota is not None and self.quota.free is not None and self.need > self.quota.free


def _gcp_gpu_metric(offer) -> str | None:
    accel = offer.extra.get("gcp_accelerator_type") if offer.extra else None
    if not accel and offer.accelerator:
        from infra.catalog import gpu_spec

        spec = gpu_spec(offer.accelerator)
        accel = spec.gcp_accelerator_type if spec else ""
    if not accel:
        return None
    return "NVIDIA_" + accel.removeprefix("nvidia-").removeprefix("tesla-").upper().replace("-", "_") + "_GPUS"


def raise_hint(cloud: str) -> str:
    if cloud == "aws":
        return ("request an increase in the Service Quotas console "
                "(or `aws service-quotas request-service-quota-increase`)")
    return "request an increase under IAM & Admin > Quotas (or `gcloud alpha services quota update`)"


def short_label(q: Quota) -> str:
    """A quota in a few words, for a narrow screen (its market said apart): AWS's "Running On-Demand G and VT
    instances" -> "G and VT", "All P5 Spot Instance Requests" -> "P5"; GCP's NVIDIA_T4_GPUS and
    PREEMPTIBLE_NVIDIA_T4_GPUS -> "T4", GPUS_ALL_REGIONS -> "all GPUs"."""
    if q.cloud == "aws":
        name = q.name.removeprefix("Running On-Demand ").removeprefix("All ")
        name = name.removesuffix(" instances").removesuffix(" Spot Instance Requests")
        return "P" if name == "P4, P3 and P2" else name
    if q.code.endswith("_ALL_REGIONS"):
        return "all " + q.code.removesuffix("_ALL_REGIONS").replace("CPUS", "CPUs").replace("GPUS", "GPUs")
    code = q.code.removeprefix("PREEMPTIBLE_").removeprefix("NVIDIA_").removesuffix("_GPUS")
    return code.replace("_", "-")


@dataclass
class QuotaBook:
    """Quotas read per (cloud, region), and why a cloud's were not read at all."""

    units: dict[tuple[str, str], cache.Unit] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)   # cloud -> why its quotas are not known
    read_now: set[tuple[str, str]] = field(default_factory=set)  # the units this call tried to read

    def _unit(self, cloud: str, region: str) -> cache.Unit | None:
        return self.units.get((cloud, region))

    def _quotas(self, cloud: str, region: str) -> dict[str, Quota] | None:
        u = self._unit(cloud, region)
        if u is None or not u.fetched_at:
            return None
        return {q["code"]: Quota(**q) for q in u.rows}

    def _missing(self, cloud: str, region: str) -> str:
        if cloud in self.unchecked:
            return self.unchecked[cloud]
        u = self._unit(cloud, region)
        if u is not None and u.error:
            return f"{cloud} {region}: {u.error}"
        return f"{cloud} {region}: not read"

    def demands(self, offer, spot: bool, nodes: int = 1) -> list[Demand]:
        if offer.cloud == "aws":
            return self._aws(offer, spot, nodes)
        if offer.cloud == "gcp":
            return self._gcp(offer, spot, nodes)
        return []

    def _aws(self, offer, spot, nodes) -> list[Demand]:
        from infra.refresh.aws_buckets import bucket_of

        need = offer.vcpus * nodes
        bucket = bucket_of(offer.instance_type, spot)
        if bucket is None:
            return [Demand("aws", offer.region, "?", need, "vCPU", None,
                           f"no known vCPU quota bucket for {offer.instance_type} {'spot' if spot else 'on-demand'}")]
        code = bucket[0]
        quotas = self._quotas("aws", offer.region)
        if quotas is None:
            return [Demand("aws", offer.region, code, need, "vCPU", None, self._missing("aws", offer.region))]
        q = quotas.get(code)
        if q is None or q.limit is None:
            return [Demand("aws", offer.region, code, need, "vCPU", None,
                           f"aws {code} not reported in {offer.region}")]
        return [Demand("aws", offer.region, code, need, "vCPU", q)]

    def _gcp(self, offer, spot, nodes) -> list[Demand]:
        out: list[Demand] = []
        regional = self._quotas("gcp", offer.region)
        project = self._quotas("gcp", GLOBAL)

        def pick(metric: str, need: float, unit: str, table, region: str, missing: str) -> Demand:
            if table is None:
                return Demand("gcp", region, metric, need, unit, None, missing)
            if spot:
                pre = table.get("PREEMPTIBLE_" + metric)
                if pre is not None and pre.limit:  # 0 or absent: Spot VMs use the standard quota
                    return Demand("gcp", region, pre.code, need, unit, pre)
            q = table.get(metric)
            if q is None or q.limit is None:
                return Demand("gcp", region, metric, need, unit, None, f"gcp {metric} not reported in {region}")
            return Demand("gcp", region, metric, need, unit, q)

        rmiss = self._missing("gcp", offer.region)
        gmiss = self._missing("gcp", GLOBAL)
        if offer.accelerator:
            gpus = offer.accelerator_count * nodes
            metric = _gcp_gpu_metric(offer)
            if metric is None:
                out.append(Demand("gcp", offer.region, "?", gpus, "GPU", None,
                                  f"no GCP accelerator type known for {offer.accelerator}"))
            else:
                out.append(pick(metric, gpus, "GPU", regional, offer.region, rmiss))
            out.append(pick("GPUS_ALL_REGIONS", gpus, "GPU", project, GLOBAL, gmiss))
        cpus = offer.vcpus * nodes
        series = offer.instance_type.split("-", 1)[0].upper()
        cpu_metric = f"{series}_CPUS" if regional is not None and f"{series}_CPUS" in regional else "CPUS"
        out.append(pick(cpu_metric, cpus, "CPU", regional, offer.region, rmiss))
        out.append(pick("CPUS_ALL_REGIONS", cpus, "CPU", project, GLOBAL, gmiss))
        return out

    def blocked(self, offer, spot: bool, nodes: int = 1) -> str | None:
        """Why this market of the offer cannot launch now (the quota to raise, its limit and use), or None."""
        short = [d for d in self.demands(offer, spot, nodes) if d.short]
        if not short:
            return None
        parts = [f"needs {d.need:g} {d.unit}{'s' if d.need != 1 else ''} of {d.quota.describe()}" for d in short
                 if d.quota is not None]
        return "quota: " + "; ".join(parts)

    def blocking_quotas(self, offer, spot: bool, nodes: int = 1) -> list[Quota]:
        return [d.quota for d in self.demands(offer, spot, nodes) if d.short and d.quota is not None]

    def unknown(self, offer, spot: bool, nodes: int = 1) -> list[str]:
        return [d.unknown_why for d in self.demands(offer, spot, nodes) if d.quota is None]

    def all_quotas(self) -> list[Quota]:
        return [Quota(**r) for u in self.units.values() for r in u.rows]
