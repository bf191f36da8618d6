"""A team cluster's planner offers now, read live from its dashboard (offers.py builds them)."""
from __future__ import annotations

from infra.base import ProvisionError
from infra.catalog import Offer
from infra.ray_cluster.resources import read_nodes
from infra.ray_cluster.settings import ClusterSettings


def live_offers(settings: ClusterSettings) -> list[Offer]:
    """The cluster's offers now; ProviderError when it does not answer or refuses the token."""
    from infra.ray_cluster.offers import cluster_offers

    nodes = read_nodes(settings.address, settings.headers(), backend=settings.backend)
    if not nodes:
        raise ProvisionError(f"{settings.backend} at {settings.address} answers but has no node alive",
                             cloud=settings.backend)
    # dlrun's GPU name -> Ray's accelerator_type name (what entrypoint_resources must ask for)
    raw = {n.gpu_type: n.ray_gpu_type or "" for n in nodes if n.gpu_type and n.gpus}
    return cluster_offers(settings, nodes, raw)
