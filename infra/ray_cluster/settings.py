"""The clusters a user named in $DLRUN_HOME/config.yaml, and their tokens (read from the user's file
each time they are needed; dlrun never copies or stores a token):

    clusters:
      gpu-lab:
        address: http://ray-head.internal:8265   # the dashboard / Jobs API
        token_file: ~/.ray/gpu-lab.token         # the cluster's Ray auth token (RAY_AUTH_MODE=token)
        price_per_gpu_hour: 1.10                 # the team's internal rate (0 allowed)
        price_per_cpu_hour: 0.02
        max_gpus: 8                              # the most GPUs dlrun may use there at once
        shared_path: /mnt/team                   # optional: a directory this machine and every node see
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from infra.base import CredentialsError
from infra.paths import dlrun_home

KEYS = ("address", "token_file", "price_per_gpu_hour", "price_per_cpu_hour", "max_gpus", "shared_path")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class ClusterConfigError(ValueError):
    """config.yaml's `clusters:` is wrong: one line naming the key."""


class UnknownClusterError(ClusterConfigError):
    """A job or --backend names a cluster config.yaml does not have."""


@dataclass(frozen=True)
class ClusterSettings:
    name: str
    address: str
    token_file: str = ""
    price_per_gpu_hour: float = 0.0
    price_per_cpu_hour: float = 0.0
    max_gpus: int | None = None
    shared_path: str = ""

    @property
    def backend(self) -> str:
        from infra.ray_cluster import backend_of

        return backend_of(self.name)

    def headers(self) -> dict[str, str]:
        """The bearer header with the token read from token_file now; none when no token_file is set."""
        if not self.token_file:
            return {}
        path = Path(self.token_file).expanduser()
        try:
            token = path.read_text().strip()
        except OSError as e:
            raise CredentialsError(f"cluster {self.name}: cannot read its token file {path} ({e.strerror}); "
                                   f"fix clusters.{self.name}.token_file in config.yaml", cloud=self.backend) from None
        if not token:
            raise CredentialsError(f"cluster {self.name}: its token file {path} is empty", cloud=self.backend)
        return {"Authorization": f"Bearer {token}"}


def parse_clusters(value, where: str) -> dict[str, ClusterSettings]:
    """The `clusters:` table of config.yaml, checked; ClusterConfigError names the key and the fix."""
    if value in (None, {}):
        return {}
    if not isinstance(value, dict):
        raise ClusterConfigError(f"{where}: clusters: expected 'NAME: {{address: ..., token_file: ...}}' entries")
    out = {}
    for name, entry in value.items():
        name = str(name)
        at = f"{where}: clusters.{name}"
        if not NAME.match(name):
            raise ClusterConfigError(f"{at}: a cluster name is letters, digits, '-', '_' or '.'")
        if not isinstance(entry, dict):
            raise ClusterConfigError(f"{at}: expected a mapping with keys {', '.join(KEYS)}")
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            raise ClusterConfigError(f"{at}: unknown key {', '.join(unknown)}; known: {', '.join(KEYS)}")
        address = str(entry.get("address") or "")
        if not address.startswith(("http://", "https://")):
            raise ClusterConfigError(f"{at}.address: expected the dashboard URL, e.g. http://ray-head:8265")
        prices = {}
        for key in ("price_per_gpu_hour", "price_per_cpu_hour"):
            v = entry.get(key, 0) or 0
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ClusterConfigError(f"{at}.{key}: expected a rate in $ per hour, 0 or more")
            prices[key] = float(v)
        max_gpus = entry.get("max_gpus")
        if max_gpus is not None and (isinstance(max_gpus, bool) or not isinstance(max_gpus, int) or max_gpus < 0):
            raise ClusterConfigError(f"{at}.max_gpus: expected a whole number of GPUs, 0 or more")
        shared = str(entry.get("shared_path") or "")
        if shared and not Path(shared).expanduser().is_absolute():
            raise ClusterConfigError(f"{at}.shared_path: expected an absolute path every node mounts")
        out[name] = ClusterSettings(name=name, address=address.rstrip("/"),
                                    token_file=str(entry.get("token_file") or ""), max_gpus=max_gpus,
                                    shared_path=str(Path(shared).expanduser()) if shared else "", **prices)
    return out


def load_clusters() -> dict[str, ClusterSettings]:
    """The clusters of $DLRUN_HOME/config.yaml (none when it has no `clusters:`)."""
    path = dlrun_home() / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return {}  # orchestrator/config.py says what is wrong with the file
    return parse_clusters(data.get("clusters") if isinstance(data, dict) else None, str(path))


def cluster_settings(name: str) -> ClusterSettings:
    clusters = load_clusters()
    if name not in clusters:
        known = ", ".join(clusters) or "none"
        raise UnknownClusterError(f"cluster:{name}: no cluster '{name}' under clusters: in "
                                 f"{dlrun_home() / 'config.yaml'} (configured: {known}); add it there")
    return clusters[name]


def headers_for_address(address: str) -> dict[str, str]:
    """The bearer header of the configured cluster at `address` (none when no cluster is there, or its
    config or token file cannot be read: the request then says the token was wanted)."""
    try:
        for s in load_clusters().values():
            if s.address == address.rstrip("/"):
                return s.headers()
    except (ClusterConfigError, CredentialsError):
        pass
    return {}


def selected(backends) -> list[ClusterSettings]:
    """The clusters a list of backend names selects (`cluster` selects every configured one)."""
    from infra.ray_cluster import KIND, cluster_name, is_cluster

    names = [b for b in backends if is_cluster(b)]
    if KIND in names:
        return list(load_clusters().values())
    return [cluster_settings(cluster_name(b)) for b in dict.fromkeys(names)]
