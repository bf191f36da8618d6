"""A team cluster's planner offers, from what its nodes really have (resources.py) and the team's rates.

One offer per GPU type and count a single node of that type holds (1, 2, 4, ... up to the largest such
node, capped by max_gpus), and one CPU offer (the most CPUs one node has). A GPU offer is charged its
GPUs at price_per_gpu_hour, a CPU offer its CPUs at price_per_cpu_hour: what the job reserves there.
Each offer carries, in `extra`, what the planner needs to say whether the job must wait for busy GPUs
and whether the cluster can ever hold it.
"""
from __future__ import annotations

from infra.catalog import Offer, gpu_spec
from infra.ray_cluster.resources import NodeResources
from infra.ray_cluster.settings import ClusterSettings


def _counts(largest: int) -> list[int]:
    counts, n = [], 1
    while n < largest:
        counts.append(n)
        n *= 2
    return counts + [largest] if largest > 0 else []


def gpu_offer(settings: ClusterSettings, nodes: list[NodeResources], gpu: str, count: int, ray_type: str) -> Offer:
    of_type = [n for n in nodes if n.gpu_type == gpu]
    holding = [n for n in of_type if n.gpus >= count]
    biggest = max(of_type, key=lambda n: n.gpus)
    spec = gpu_spec(gpu)
    cpus = int(biggest.cpus * count / biggest.gpus) if biggest.gpus else 0
    free = [n.free_gpus for n in holding]
    known = [f for f in free if f is not None]
    return Offer(cloud=settings.backend, region="", instance_type=f"gpus-{count}", accelerator=gpu,
                 accelerator_count=count, gpu_memory_gb=spec.memory_gb if spec else 0.0, vcpus=max(cpus, 1),
                 memory_gb=round(biggest.memory_gb * count / biggest.gpus, 1) if biggest.gpus else biggest.memory_gb,
                 price_per_hour=round(count * settings.price_per_gpu_hour, 6), spot_price_per_hour=None,
                 source=f"team cluster {settings.name} ({settings.address}), internal rate",
                 extra={"cluster": settings.name, "ray_accelerator": ray_type, "gpus": count,
                        "nodes_holding": len(holding), "largest_node": int(biggest.gpus),
                        "total_of_type": int(sum(n.gpus for n in of_type)), "max_gpus": settings.max_gpus,
                        # the most GPUs of this type free on one node now (None: the cluster does not say)
                        "free_now": int(max(known)) if free and len(known) == len(free) else None,
                        "shared_path": settings.shared_path})


def cpu_offer(settings: ClusterSettings, nodes: list[NodeResources]) -> Offer:
    biggest = max(nodes, key=lambda n: n.cpus)
    cpus = int(biggest.cpus)
    free = None if biggest.used_cpus is None else int(biggest.cpus - biggest.used_cpus)
    return Offer(cloud=settings.backend, region="", instance_type=f"cpus-{cpus}", accelerator=None,
                 accelerator_count=0, gpu_memory_gb=0.0, vcpus=cpus, memory_gb=biggest.memory_gb,
                 price_per_hour=round(cpus * settings.price_per_cpu_hour, 6), spot_price_per_hour=None,
                 source=f"team cluster {settings.name} ({settings.address}), internal rate",
                 extra={"cluster": settings.name, "cpus": cpus, "free_cpus_now": free,
                        "nodes_holding": sum(1 for n in nodes if n.cpus >= cpus), "shared_path": settings.shared_path})


def cluster_offers(settings: ClusterSettings, nodes: list[NodeResources], raw_types: dict[str, str]) -> list[Offer]:
    """raw_types: dlrun's GPU name -> Ray's accelerator_type name on this cluster."""
    if not nodes:
        return []
    offers = []
    for gpu, ray_type in sorted(raw_types.items()):
        largest = int(max(n.gpus for n in nodes if n.gpu_type == gpu))
        if settings.max_gpus is not None:
            largest = min(largest, settings.max_gpus)
        offers += [gpu_offer(settings, nodes, gpu, c, ray_type) for c in _counts(largest)]
    return [*offers, cpu_offer(settings, nodes)]


def wished_offer(base: Offer, count: int) -> Offer:
    """An offer for a GPU count the job wishes and no node holds: planned only to say why it is out."""
    from dataclasses import replace

    per_gpu = base.price_per_hour / max(1, base.accelerator_count)
    return replace(base, instance_type=f"gpus-{count}", accelerator_count=count,
                   price_per_hour=round(per_gpu * count, 6),
                   extra={**base.extra, "gpus": count, "nodes_holding": 0, "free_now": None})


def never_fits(offer: Offer, num_nodes: int) -> str | None:
    """Why the cluster can never hold this job (more GPUs than a node or max_gpus allows), or None."""
    x = offer.extra
    where = f"cluster {x.get('cluster')}"
    if offer.accelerator:
        if x.get("max_gpus") is not None and x["gpus"] * num_nodes > x["max_gpus"]:
            need = x["gpus"] * num_nodes
            return f"{where} lets dlrun use at most {x['max_gpus']} GPUs (max_gpus); the job needs {need}"
        if x.get("nodes_holding", 0) < num_nodes:
            have = f"its largest {offer.accelerator} node has {x.get('largest_node')}"
            return (f"{where} can never hold {num_nodes}×{x['gpus']}×{offer.accelerator}: {have}"
                    + (f", {x['nodes_holding']} node(s) hold {x['gpus']}" if num_nodes > 1 else ""))
        return None
    if x.get("nodes_holding", 0) < num_nodes:
        return f"{where} has {x.get('nodes_holding', 0)} node(s) with {x.get('cpus')} CPUs; the job needs {num_nodes}"
    return None


def wait_note(offer: Offer, num_nodes: int) -> str | None:
    """When the job would have to wait for busy GPUs (or CPUs) there now; None when they are free or unknown."""
    x = offer.extra
    if offer.accelerator:
        free = x.get("free_now")
        if free is not None and free < x["gpus"]:
            return f"waits: {x['gpus'] - free} {offer.accelerator} busy"
        return None
    free = x.get("free_cpus_now")
    if free is not None and free < x.get("cpus", 0):
        return f"waits: {x['cpus'] - free} CPUs busy"
    return None
