"""What a team Ray cluster holds now, summed from its nodes' resources (infra.ray_cluster.resources)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infra.ray_cluster.resources import NodeResources


@dataclass(frozen=True)
class GpuGroup:
    gpu: str                # the GPU type, or what Ray says when the node names none
    nodes: int
    gpus: float
    free: float | None      # None: some node does not say what it uses
    most_on_one: float      # the largest GPU count of one node (a job's GPUs are on one node)


@dataclass(frozen=True)
class Capacity:
    nodes: int
    gpus: list[GpuGroup]    # by GPU type, sorted
    cpus: float
    free_cpus: float | None  # None: some node does not say what it uses
    memory_gb: float


def capacity(nodes: list[NodeResources]) -> Capacity:
    by_type: dict[str, list[NodeResources]] = {}
    for n in nodes:
        if n.gpus:
            by_type.setdefault(n.gpu_type or "GPU (no accelerator_type)", []).append(n)
    groups = []
    for gpu, of_type in sorted(by_type.items()):
        free_gpus = [n.free_gpus for n in of_type]
        free = None if any(f is None for f in free_gpus) else sum(f for f in free_gpus if f is not None)
        groups.append(GpuGroup(gpu, len(of_type), sum(n.gpus for n in of_type), free,
                               max(n.gpus for n in of_type)))
    cpus = sum(n.cpus for n in nodes)
    used = [n.used_cpus for n in nodes]
    free_cpus = None if any(u is None for u in used) else cpus - sum(u for u in used if u is not None)
    return Capacity(len(nodes), groups, cpus, free_cpus, sum(n.memory_gb for n in nodes))
