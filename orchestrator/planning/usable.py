"""Which of a job's backends can be used from here, asked before anything else: a cloud without credentials
is planned only to say why it is out, and a job that only such clouds could run ends with the credentials
line and exit 4, before any profiling, registry, price, quota, network or firewall step.

The answer comes from the environment and the usual files (infra/refresh/logins.py, through the SOURCES
registry: no call, no SDK); `dlrun check` asks the clouds themselves.
"""
from __future__ import annotations

from orchestrator.errors import CloudCredentialsError, UsageError


def check_backend(backend: str | None) -> None:
    """--backend: one of the registry's names or a configured cluster:NAME (exit 2 otherwise)."""
    from infra import backend_choices

    if backend is not None and backend not in backend_choices():
        raise UsageError(f"--backend: '{backend}' is not one of {', '.join(backend_choices())} "
                         "(a team cluster: add it under clusters: in config.yaml)")


def unusable_backends(names) -> dict[str, str]:
    """backend -> what keeps it out and what fixes it (its credentials are missing), for the named backends."""
    from infra.refresh.sources import SOURCES

    out: dict[str, str] = {}
    for name in names:
        why = SOURCES[name].credentials() if name in SOURCES else None
        if why:
            out[name] = why
    return out


def credentials_error(name: str, unusable: dict[str, str], clouds) -> CloudCredentialsError:
    """The one line: which clouds could run the job, what each lacks and what fixes it."""
    wanted = [c for c in clouds if c in unusable]
    lines = "; ".join(f"{c}: {unusable[c]}" for c in wanted)
    only = "only " if len(wanted) == 1 else ""
    return CloudCredentialsError(f"{name}: {only}{' or '.join(wanted)} could run this job, and "
                                 f"{'it has' if len(wanted) == 1 else 'they have'} no credentials here — {lines} "
                                 "(`dlrun check` says what is usable)")


def require_usable(spec, backend: str | None = None) -> dict[str, str]:
    """The unusable backends of the job (on `backend` only, when given: a bad name is exit 2); before any
    profiling, CloudCredentialsError (exit 4) when every backend whose offers the job's own rules (clouds,
    regions, accelerators, GPU memory, nodes, spot, software) let in lacks credentials. A team cluster counts
    as usable here (what it has is known only by asking it)."""
    from infra import capabilities, offers_for
    from orchestrator.planning.planner import exclusion_reason, markets, restrict

    check_backend(backend)
    _check_cluster_config()
    spec = restrict(spec, backend)
    unusable = unusable_backends(spec.resources.clouds)
    if not unusable:
        return unusable
    fits: dict[str, bool] = {}
    for name in spec.resources.clouds:
        caps = capabilities(name)
        if caps.remote and not caps.provisioned:  # a team cluster: what it has is not asked here
            if _configured_clusters(name):
                return unusable
            continue
        fits[name] = any(exclusion_reason(spec, o, frozenset()) is None and markets(o, spec.resources.spot)
                         for o in offers_for([name]))
    usable_fits = any(fit for name, fit in fits.items() if name not in unusable)
    could = [name for name, fit in fits.items() if fit and name in unusable]
    if could and not usable_fits:
        raise credentials_error(spec.name, unusable, could)
    return unusable


def _configured_clusters(name: str) -> list:
    """The team clusters of config.yaml a backend name selects (config.yaml's own mistakes are the plan's to say)."""
    from infra.ray_cluster.settings import ClusterConfigError, selected

    try:
        return selected([name])
    except ClusterConfigError:
        return [name]


def _check_cluster_config() -> None:
    """config.yaml's own mistake (a `clusters:` entry) is said before what it would hide (exit 2)."""
    from infra.ray_cluster.settings import ClusterConfigError, load_clusters

    try:
        load_clusters()
    except ClusterConfigError as e:
        raise UsageError(str(e)) from None
