"""`dlrun clusters`: the team Ray clusters named in config.yaml, with what each has (and has free) now."""
from __future__ import annotations

import click


def _amount(free, total) -> str:
    return f"{total:g}" if free is None else f"{free:g} free of {total:g}"


def cluster_lines(settings) -> list[str]:
    """One cluster, as lines: where, the rates, and its nodes' resources now (or why they are unknown)."""
    from infra.base import ProviderError
    from infra.ray_cluster.resources import read_nodes

    cap = f", max {settings.max_gpus} GPUs for dlrun" if settings.max_gpus is not None else ""
    head = (f"{settings.backend}  {settings.address}  ${settings.price_per_gpu_hour:g}/GPU-h, "
            f"${settings.price_per_cpu_hour:g}/CPU-h{cap}")
    try:
        nodes = read_nodes(settings.address, settings.headers(), backend=settings.backend)
    except ProviderError as e:
        return [head, f"  not available: {e.message}"]
    lines = [head, f"  {len(nodes)} node{'s' if len(nodes) != 1 else ''} alive"]
    by_type: dict[str, list] = {}
    for n in nodes:
        if n.gpus:
            by_type.setdefault(n.gpu_type or "GPU (no accelerator_type)", []).append(n)
    for gpu, of_type in sorted(by_type.items()):
        free = None if any(n.free_gpus is None for n in of_type) else sum(n.free_gpus for n in of_type)
        lines.append(f"  {gpu}: {_amount(free, sum(n.gpus for n in of_type))} GPUs on {len(of_type)} node(s), "
                     f"at most {max(n.gpus for n in of_type):g} on one")
    cpus = sum(n.cpus for n in nodes)
    used = None if any(n.used_cpus is None for n in nodes) else sum(n.used_cpus for n in nodes)
    lines.append(f"  CPUs: {_amount(None if used is None else cpus - used, cpus)}, "
                 f"memory {sum(n.memory_gb for n in nodes):g} GB")
    return lines


@click.command("clusters")
def clusters():
    """The team Ray clusters of config.yaml and what they have free now."""
    from orchestrator.config import config_path, load_settings

    found = load_settings().clusters
    if not found:
        click.echo(f"no team clusters: add one under clusters: in {config_path()} (see the README, "
                   "\"Your team's Ray cluster\")")
        return
    for settings in found.values():
        click.echo("\n".join(cluster_lines(settings)))
