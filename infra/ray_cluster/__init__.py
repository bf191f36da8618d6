"""A team's existing Ray cluster as a backend: dlrun reserves nothing there, it submits jobs to the
cluster's Jobs API with the cluster's token and stops them again.

Backend names: `cluster:NAME` for one cluster named in $DLRUN_HOME/config.yaml `clusters:`, `cluster` for
every one of them.
"""
from __future__ import annotations

KIND = "cluster"
PREFIX = KIND + ":"


def is_cluster(backend: str) -> bool:
    return backend == KIND or backend.startswith(PREFIX)


def cluster_name(backend: str) -> str:
    """`cluster:gpu-lab` -> `gpu-lab` ("" for the bare `cluster`)."""
    return backend[len(PREFIX):] if backend.startswith(PREFIX) else ""


def backend_of(name: str) -> str:
    return PREFIX + name
