"""The user's dlrun settings: $DLRUN_HOME/config.yaml (optional; every key has a default).

    default_deadline: 72h     # applied when a job names no deadline (the plan says so)
    optimize: cost            # cost | time: what "best" means among the candidates that fit
    mirrors:                  # where cloud nodes get their packages (corporate / air-gapped networks)
      pypi: https://pypi.example.internal/simple   # a PEP 503 index: uv itself and every package (default: PyPI)
      torch: https://mirror.example.internal/whl   # stands for https://download.pytorch.org/whl (its cpu/, cu126/, ...)
      apt: https://mirror.example.internal/debian  # a Debian/Ubuntu mirror: podman for a job's `image:` on a node
    aws:
      subnets: {us-east-2: subnet-0abc}            # launch there instead of the default VPC / dlrun's VPC
    clusters:                 # a team's Ray clusters, planned as `cluster:NAME` (infra/ray_cluster/settings.py)
      gpu-lab: {address: http://ray-head:8265, token_file: ~/.ray/gpu-lab.token, price_per_gpu_hour: 1.1,
                price_per_cpu_hour: 0.02, max_gpus: 8, shared_path: /mnt/team}
"""
from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.paths import dlrun_home

DEFAULTS = {"default_deadline": "72h", "optimize": "cost", "mirrors": {}, "aws": {}, "clusters": {}}
OBJECTIVES = ("cost", "time")
# no apt mirror: the boot installs nothing with apt (uv comes from the PyPI index; python3 is on every image
# that runs cloud-init, which is written in Python)
MIRROR_KEYS = ("pypi", "torch", "apt")
AWS_KEYS = ("subnets",)


@dataclass(frozen=True)
class Settings:
    default_deadline: str
    default_deadline_seconds: float
    optimize: str
    source: str  # where the values came from, for the plan's note
    mirrors: dict = field(default_factory=dict)      # pypi / torch / apt -> URL (only those set)
    aws_subnets: dict = field(default_factory=dict)  # region -> subnet id the user chose
    clusters: dict = field(default_factory=dict)     # name -> infra.ray_cluster.settings.ClusterSettings


def config_path():
    return dlrun_home() / "config.yaml"


def load_settings() -> Settings:
    import yaml

    from orchestrator.errors import UsageError
    from orchestrator.planning.spec import parse_duration

    path = config_path()
    data: dict = {}
    if path.exists():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix or remove the file") from None
        if not isinstance(data, dict):
            raise UsageError(f"{path}: expected 'key: value' lines (e.g. default_deadline: 72h)")
        unknown = sorted(set(data) - set(DEFAULTS))
        if unknown:
            raise UsageError(f"{path}: unknown setting {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    values = {**DEFAULTS, **{k: v for k, v in data.items() if v is not None}}
    try:
        seconds = parse_duration(values["default_deadline"])
    except ValueError as e:
        raise UsageError(f"{path}: default_deadline: {e}") from None
    if values["optimize"] not in OBJECTIVES:
        raise UsageError(f"{path}: optimize: '{values['optimize']}' is not one of {', '.join(OBJECTIVES)}")
    source = str(path) if "default_deadline" in data else "dlrun's default"
    mirrors = _table(path, "mirrors", values["mirrors"], MIRROR_KEYS)
    for key, url in mirrors.items():
        if not isinstance(url, str) or "://" not in url:
            raise UsageError(f"{path}: mirrors.{key}: expected a URL such as https://mirror.example/simple")
        if "@" in url.split("://", 1)[1].split("/", 1)[0]:
            raise UsageError(f"{path}: mirrors.{key}: the URL carries credentials, and it is written into every "
                             "node's start-up script (user-data / instance metadata, readable by anyone with "
                             "describe rights); give a mirror the cluster's network may read without them")
    aws = _table(path, "aws", values["aws"], AWS_KEYS)
    subnets = aws.get("subnets") or {}
    if not isinstance(subnets, dict) or not all(isinstance(v, str) and v.startswith("subnet-")
                                                for v in subnets.values()):
        raise UsageError(f"{path}: aws.subnets: expected 'REGION: subnet-ID' pairs, e.g. {{us-east-2: subnet-0abc}}")
    from infra.ray_cluster.settings import ClusterConfigError, parse_clusters

    try:
        clusters = parse_clusters(values["clusters"], str(path))
    except ClusterConfigError as e:
        raise UsageError(str(e)) from None
    return Settings(str(values["default_deadline"]), seconds, values["optimize"], source,
                    mirrors={k: v.rstrip("/") for k, v in mirrors.items() if v}, aws_subnets=dict(subnets),
                    clusters=clusters)


def _table(path, name: str, value, keys: tuple[str, ...]) -> dict:
    from orchestrator.errors import UsageError

    if not isinstance(value, dict):
        raise UsageError(f"{path}: {name}: expected a mapping with keys {', '.join(keys)}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise UsageError(f"{path}: {name}: unknown key {', '.join(unknown)}; known: {', '.join(keys)}")
    return value
