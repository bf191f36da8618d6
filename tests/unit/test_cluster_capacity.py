"""What `dlrun clusters` says a team cluster holds (orchestrator/monitoring/cluster_capacity.py), summed from
the nodes' resources as infra.ray_cluster.resources reads them."""
from __future__ import annotations

from infra.ray_cluster.resources import NodeResources
from orchestrator.monitoring.cluster_capacity import GpuGroup, capacity


def node(i: int, *, cpus=8.0, gpus=0.0, gpu_type=None, used_cpus=None, used_gpus=None) -> NodeResources:
    return NodeResources(f"n{i}", i == 0, cpus, gpus, gpu_type, 32.0, used_cpus=used_cpus, used_gpus=used_gpus)


def test_gpus_are_grouped_by_type_with_what_is_free():
    have = capacity([node(0, used_cpus=1.0), node(1, gpus=4.0, gpu_type="A100", used_cpus=4.0, used_gpus=3.0),
                     node(2, gpus=2.0, gpu_type="A100", used_cpus=0.0, used_gpus=0.0),
                     node(3, gpus=1.0, used_cpus=0.0, used_gpus=1.0)])
    assert have.gpus == [GpuGroup("A100", 2, 6.0, 3.0, 4.0), GpuGroup("GPU (no accelerator_type)", 1, 1.0, 0.0, 1.0)]
    assert (have.nodes, have.cpus, have.free_cpus, have.memory_gb) == (4, 32.0, 27.0, 128.0)


def test_a_node_that_does_not_say_what_it_uses_leaves_free_unknown():
    have = capacity([node(0, gpus=2.0, gpu_type="T4", used_cpus=2.0, used_gpus=1.0),
                     node(1, gpus=2.0, gpu_type="T4")])
    assert have.gpus[0].free is None and have.free_cpus is None and have.gpus[0].gpus == 4.0
