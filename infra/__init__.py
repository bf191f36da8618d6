"""Places a cluster can live, behind one contract (infra/base.py), named in one registry.

The registry is data only: asking for a backend's name, capabilities or offers imports no cloud SDK;
`get_provider` imports the backend's module (and its SDK) when a cluster is really wanted.
"""
from __future__ import annotations

import importlib

from infra.base import Capabilities

# name -> (module:class, what the orchestrator may ask of it instead of comparing names)
BACKENDS: dict[str, tuple[str, Capabilities]] = {
    "local": ("infra.local.provider:LocalProvider",
              Capabilities(remote=False, spot=False, multi_node=False, billed=False, regional=False)),
    "aws": ("infra.aws.provider:AwsProvider",
            Capabilities(remote=True, spot=True, multi_node=True, billed=True, regional=True)),
    "gcp": ("infra.gcp.provider:GcpProvider",
            Capabilities(remote=True, spot=True, multi_node=True, billed=True, regional=True)),
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)
CLOUD_NAMES: tuple[str, ...] = tuple(n for n, (_, caps) in BACKENDS.items() if caps.remote)


def capabilities(name: str) -> Capabilities:
    try:
        return BACKENDS[name][1]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKEND_NAMES)}") from None


def get_provider(name: str, **kwargs):
    """The backend called `name`; imports its SDK only now."""
    capabilities(name)  # unknown names fail with the list of known ones
    module, _, cls = BACKENDS[name][0].partition(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


def offers_for(names) -> list:
    """The planner's candidates from these backends: this machine's GPUs/CPU, and catalog rows."""
    from infra.catalog import load_offers
    from infra.local.gpus import local_offers

    names = [capabilities(n) and n for n in names]
    found = local_offers() if "local" in names else []
    clouds = {n for n in names if capabilities(n).remote}
    if clouds:
        found += [o for o in load_offers() if o.cloud in clouds]
    return found


def runs_here(cloud: str) -> bool:
    """Whether a backend's clusters are this machine (measured steps apply, no code shipping)."""
    return not capabilities(cloud).remote
