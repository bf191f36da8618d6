"""What a team's Ray cluster has, read from its dashboard with its token (Ray 2.60, checked against a live
token-auth cluster): the alive nodes and their logical resources from the state API (GET /api/v0/nodes,
exact resource names such as `accelerator_type:A100`), and what is in use per node from the autoscaler's
load report (GET /api/cluster_status: clusterStatus.loadMetricsReport.usageByNode, [used, total] per
resource; absent when no autoscaler monitor writes it, then "free now" is unknown).
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from infra.base import CredentialsError, ProvisionError
from infra.catalog import canonical_gpu

ACCELERATOR_PREFIX = "accelerator_type:"


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    is_head: bool
    cpus: float
    gpus: float
    gpu_type: str | None  # canonical name when dlrun's catalog knows it, else Ray's name
    memory_gb: float
    ray_gpu_type: str | None = None  # the name in Ray's accelerator_type:NAME resource
    used_cpus: float | None = None  # None: the cluster does not say
    used_gpus: float | None = None

    @property
    def free_gpus(self) -> float | None:
        return None if self.used_gpus is None else max(0.0, self.gpus - self.used_gpus)


def get_json(address: str, path: str, headers: dict[str, str], *, backend: str, timeout: float = 10.0,
             method: str = "GET"):
    """One request to the cluster's dashboard; CredentialsError when its token is refused, ProvisionError
    when it does not answer."""
    req = urllib.request.Request(address + path, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            had = "its token was refused" if headers else "it wants a token: set token_file"
            raise CredentialsError(f"{backend} at {address} answered {e.code}: {had}", cloud=backend) from None
        raise ProvisionError(f"{backend} at {address}: {path} answered {e.code}", cloud=backend) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ProvisionError(f"{backend} at {address} does not answer ({getattr(e, 'reason', e)})",
                             cloud=backend) from None


def gpu_name(ray_name: str) -> str:
    """Ray's accelerator type as dlrun's catalog names it: A100 -> A100, A100-80G -> A100-80GB, A100-40G ->
    A100, T4 -> T4 (Ray's names: ray/util/accelerators/accelerators.py)."""
    for candidate in (ray_name, ray_name + "B" if ray_name.upper().endswith("G") else "", ray_name.split("-")[0]):
        found = canonical_gpu(candidate) if candidate else None
        if found:
            return found
    return ray_name


def read_nodes(address: str, headers: dict[str, str], *, backend: str, timeout: float = 5.0) -> list[NodeResources]:
    """The cluster's alive nodes with their resources and, where the cluster says, what is in use."""
    listing = get_json(address, "/api/v0/nodes?detail=1&limit=10000", headers, backend=backend, timeout=timeout)
    rows = (((listing or {}).get("data") or {}).get("result") or {}).get("result") or []
    usage = _usage_by_node(address, headers, backend=backend, timeout=timeout)
    nodes = []
    for row in rows:
        if row.get("state") != "ALIVE":
            continue
        total = row.get("resources_total") or {}
        # the most specific name first: Ray may add A100-80G beside A100 on the same node
        types = sorted((k[len(ACCELERATOR_PREFIX):] for k in total if k.startswith(ACCELERATOR_PREFIX)),
                       key=len, reverse=True)
        used = usage.get(row.get("node_id", ""))
        nodes.append(NodeResources(
            node_id=row.get("node_id", ""), is_head=bool(row.get("is_head_node")), cpus=float(total.get("CPU", 0)),
            gpus=float(total.get("GPU", 0)), gpu_type=gpu_name(types[0]) if types else None,
            memory_gb=round(float(total.get("memory", 0)) / 2**30, 1), ray_gpu_type=types[0] if types else None,
            used_cpus=None if used is None else float((used.get("CPU") or [0])[0]),
            used_gpus=None if used is None else float((used.get("GPU") or [0])[0])))
    return nodes


def _usage_by_node(address: str, headers: dict[str, str], *, backend: str, timeout: float) -> dict:
    try:
        status = get_json(address, "/api/cluster_status", headers, backend=backend, timeout=timeout)
    except ProvisionError:
        return {}
    report = ((((status or {}).get("data") or {}).get("clusterStatus") or {}).get("loadMetricsReport") or {})
    return report.get("usageByNode") or {}
