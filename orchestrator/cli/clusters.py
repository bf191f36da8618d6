"""`dlrun clusters`: the team Ray clusters named in config.yaml, with what each has (and has free) now."""
from __future__ import annotations

import click


def _amount(free, total) -> str:
    return f"{total:g}" if free is None else f"{free:g} free of {total:g}"


def cluster_lines(settings) -> list[str]:
    """One cluster, as lines: where, the rates, and its nodes' resources now (or why they are unknown)."""
    from infra.base import ProviderError
    from infra.ray_cluster.resources import read_nodes
    from orchestrator.monitoring.cluster_capacity import capacity

    cap = f", max {settings.max_gpus} GPUs for dlrun" if settings.max_gpus is not None else ""
    head = (f"{settings.backend}  {settings.address}  ${settings.price_per_gpu_hour:g}/GPU-h, "
            f"${settings.price_per_cpu_hour:g}/CPU-h{cap}")
    try:
        nodes = read_nodes(settings.address, settings.headers(), backend=settings.backend)
    except ProviderError as e:
        return [head, f"  not available: {e.message}"]
    have = capacity(nodes)
    lines = [head, f"  {have.nodes} node{'s' if have.nodes != 1 else ''} alive"]
    for g in have.gpus:
        lines.append(f"  {g.gpu}: {_amount(g.free, g.gpus)} GPUs on {g.nodes} node(s), "
                     f"at most {g.most_on_one:g} on one")
    lines.append(f"  CPUs: {_amount(have.free_cpus, have.cpus)}, memory {have.memory_gb:g} GB")
    return lines


@click.command("clusters")
def clusters():
    """The team Ray clusters of config.yaml and what they have free now."""
    from orchestrator.config import config_path, load_settings

    found = load_settings().clusters
    if not found:
        click.echo(f"no team clusters: add one under clusters: in {config_path()} (see "
                   "docs/clusters.md)")
        return
    for settings in found.values():
        click.echo("\n".join(cluster_lines(settings)))
