"""The fake Compute Engine's quotas (a FakeGce mixin): which quota an instance insert draws on, and GCE's
answer when that quota is exhausted.

As GCE: GPUS_ALL_REGIONS any GPU VM; NVIDIA_T4_GPUS a standard T4 VM of its region (and a spot one, as where
the region has no preemptible quota); PREEMPTIBLE_NVIDIA_T4_GPUS a spot T4 VM; CPUS an N1/E2 VM, N2_CPUS an N2
VM, PREEMPTIBLE_CPUS a spot one; others every VM of the region (cloud.google.com/compute/resource-usage). The
message is GCE's ("Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region us-central1."), in the insert's
operation error with a quotaInfo detail naming the metric and limit, or (`on_insert`) as the insert call's own
HTTP 403 quotaExceeded.
Not reproduced: limits above 0 (a quota set here is exhausted), usage counts, regions' different limits.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tests.support.gce_errors import ApiError

# the accelerator type a GPU quota metric counts (cloud.google.com/compute/resource-usage#gpu_quota)
GPU_TYPES = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
             "K80": "nvidia-tesla-k80", "P4": "nvidia-tesla-p4", "A100": "nvidia-tesla-a100",
             "A100_80GB": "nvidia-a100-80gb", "L4": "nvidia-l4", "H100": "nvidia-h100-80gb"}


@dataclass
class Quota:
    metric: str  # GPUS_ALL_REGIONS (global) or a regional one such as NVIDIA_T4_GPUS
    region: str | None = None
    on_insert: bool = False  # reported as the insert's HTTP error instead of in the operation

    def applies(self, region: str, machine: str, accelerator: str, spot: bool, run_limited: bool = False) -> bool:
        """Whether an instance (region, machine type, GPU type or "", market) draws on this quota. A GPU VM
        deleted after a run time of at most 7 days (`run_limited`) may draw on preemptible quota even on
        demand (cloud.google.com/compute/docs/instances/limit-vm-runtime, "GPU VMs and preemptible
        allocation quotas"): here it does whenever such a quota is set."""
        if self.region not in (None, region):
            return False
        metric = self.metric
        if metric.startswith("PREEMPTIBLE_"):
            if not (spot or (run_limited and accelerator)):
                return False
            metric = metric[len("PREEMPTIBLE_"):]
        series = machine.split("-", 1)[0]
        if metric == "GPUS_ALL_REGIONS":
            return bool(accelerator)
        if m := re.fullmatch(r"NVIDIA_([A-Z0-9_]+)_GPUS", metric):
            return accelerator == GPU_TYPES.get(m.group(1), "")
        if metric == "CPUS":
            return series in ("n1", "e2", "f1", "g1")
        if m := re.fullmatch(r"([A-Z][A-Z0-9]*)_CPUS", metric):
            return series == m.group(1).lower() or metric == "CPUS_ALL_REGIONS"
        return True

    def exceeded(self, region: str) -> tuple[int, str, str, dict]:
        """GCE's operation error for this quota: the message and a quotaInfo detail naming the metric and
        limit; an on_insert quota raises the insert call's own 403 instead."""
        scope = "globally" if self.metric.endswith("ALL_REGIONS") else f"in region {region}"
        message = f"Quota '{self.metric}' exceeded.  Limit: 0.0 {scope}."
        if self.on_insert:
            raise ApiError(403, message, "quotaExceeded")
        quota_info = {"metricName": f"compute.googleapis.com/{self.metric.lower()}",
                      "limitName": f"{self.metric.replace('_', '-')}-per-project"
                                   + ("" if self.metric.endswith("ALL_REGIONS") else "-region"),
                      "limit": 0, **({} if self.metric.endswith("ALL_REGIONS") else
                                     {"dimensions": {"region": region}})}
        return (403, "QUOTA_EXCEEDED", message, {"quotaInfo": quota_info})


class QuotaApi:
    """Mixed into FakeGce: its quota table."""

    quotas: list  # Quota, each exhausted

    def quota(self, metric: str, region: str | None = None, *, on_insert: bool = False) -> None:
        self.quotas.append(Quota(metric, region, on_insert))

    def quota_error(self, region: str, machine: str, accelerator: str, spot: bool,
                    run_limited: bool) -> tuple[int, str, str, dict] | None:
        """The operation error of the first exhausted quota this instance draws on (an on_insert quota first:
        a refused call comes before an operation), None if none."""
        for q in sorted(self.quotas, key=lambda q: not q.on_insert):
            if q.applies(region, machine, accelerator, spot, run_limited):
                return q.exceeded(region)
        return None
