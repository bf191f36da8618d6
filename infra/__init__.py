"""Places a cluster can live, behind one contract (infra/base.py), named in one registry.

The registry is data only: asking for a backend's name, capabilities or offers imports no cloud SDK;
`get_provider` imports the backend's module (and its SDK) when a cluster is really wanted.
"""
from __future__ import annotations

import importlib

from infra.base import Capabilities, Provider

# name -> (module:class, what the orchestrator may ask of it instead of comparing names)
BACKENDS: dict[str, tuple[str, Capabilities]] = {
    "local": ("infra.local.provider:LocalProvider",
              Capabilities(remote=False, spot=False, multi_node=False, billed=False, regional=False,
                           provisioned=False, containers=True)),
    "aws": ("infra.aws.provider:AwsProvider",
            Capabilities(remote=True, spot=True, multi_node=True, billed=True, regional=True, containers=True)),
    "gcp": ("infra.gcp.provider:GcpProvider",
            Capabilities(remote=True, spot=True, multi_node=True, billed=True, regional=True, containers=True)),
    # a team's existing Ray cluster: `cluster:NAME` (config.yaml `clusters:`), `cluster` for all of them;
    # billed at the team's internal rate, its loss watched like a preemption; dlrun installs nothing there
    "cluster": ("infra.ray_cluster.provider:RayClusterProvider",
                Capabilities(remote=True, spot=False, multi_node=True, billed=True, regional=False,
                             provisioned=False, containers=True)),
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)
CLOUD_NAMES: tuple[str, ...] = tuple(n for n, (_, caps) in BACKENDS.items() if caps.remote)


def kind(name: str) -> str:
    """The registry entry of a backend name: `cluster:gpu-lab` -> `cluster`, `aws` -> `aws`."""
    return name.split(":", 1)[0] if name.startswith("cluster:") else name


def capabilities(name: str) -> Capabilities:
    try:
        return BACKENDS[kind(name)][1]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKEND_NAMES)}, cluster:NAME") from None


def selects(backend: str, names) -> bool:
    """Whether a list of backend names (a job's clouds) takes in `backend`: `cluster` takes every cluster:NAME."""
    return backend in names or (kind(backend) == "cluster" and "cluster" in names)


def backend_choices() -> tuple[str, ...]:
    """What --backend accepts: the registry's names and each configured cluster:NAME (config.yaml)."""
    from infra.ray_cluster.settings import ClusterConfigError, load_clusters

    try:
        clusters = load_clusters()
    except ClusterConfigError:
        clusters = {}
    return BACKEND_NAMES + tuple(s.backend for s in clusters.values())


def provider_class(name: str) -> type[Provider]:
    """The class behind a backend name (imports its module, and so its SDK); constructs nothing."""
    capabilities(name)  # unknown names fail with the list of known ones
    module, _, cls = BACKENDS[kind(name)][0].partition(":")
    found = getattr(importlib.import_module(module), cls)
    if not (isinstance(found, type) and issubclass(found, Provider)):
        raise TypeError(f"{module}:{cls} (backend {kind(name)}) is not an infra.base.Provider")
    return found


def get_provider(name: str, **kwargs) -> Provider:
    """The backend called `name`; imports its SDK only now."""
    if kind(name) == "cluster":
        kwargs["name"] = name
    return provider_class(name)(**kwargs)


def offers_for(names, problems: list[str] | None = None) -> list:
    """The planner's candidates from these backends: this machine's GPUs/CPU, catalog rows, and what each
    selected team cluster has now (one that does not answer adds a line to `problems` and no offers)."""
    from infra.catalog import load_offers
    from infra.local.gpus import local_offers

    names = [capabilities(n) and n for n in names]
    found = local_offers() if "local" in names else []
    clouds = {n for n in names if capabilities(n).remote and kind(n) != "cluster"}
    if clouds:
        found += [o for o in load_offers() if o.cloud in clouds]
    if any(kind(n) == "cluster" for n in names):
        from infra.base import ProviderError
        from infra.ray_cluster.live import live_offers
        from infra.ray_cluster.settings import selected

        for settings in selected(names):
            try:
                found += live_offers(settings)
            except ProviderError as e:
                if problems is not None:
                    problems.append(f"{settings.backend} left out of the plan: {e.message}")
    return found


def runs_here(cloud: str) -> bool:
    """Whether a backend's clusters are this machine (measured steps apply, no code shipping)."""
    return not capabilities(cloud).remote
