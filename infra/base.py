"""The provider interface every backend implements, and the errors each maps its failures to.

The runner's failover is one loop over these errors: CapacityError blocks the offer (zone) and
tries the next candidate, QuotaError blocks what draws on the exhausted quota (else the region),
CredentialsError blocks the whole cloud.
"""
from __future__ import annotations

import json
import re
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Callable, Literal

from infra.catalog import Offer, canonical_gpu

# every resource dlrun creates carries these tags/labels (GCP labels: lower case, '-' allowed)
TAG_CLUSTER = "dlrun-cluster"
TAG_JOB = "dlrun-job"
TAG_OWNER = "dlrun-owner"

NodeStatus = Literal["pending", "running", "preempted", "terminated", "gone"]


class ProviderError(Exception):
    """Base of provider failures. `scope` says what to block: offer, zone, region, cloud, or (QuotaError)
    the offers that draw on one quota."""

    scope = "offer"

    def __init__(self, message: str, *, cloud: str = "", region: str = "", zone: str = ""):
        super().__init__(message)
        self.message, self.cloud, self.region, self.zone = message, cloud, region, zone


class CapacityError(ProviderError):
    """No capacity for this instance type here: try the next zone, then the next candidate."""

    scope = "offer"


@dataclass(frozen=True)
class QuotaScope:
    """The offers one exhausted quota rules out, as the cloud scopes it: an AWS vCPU bucket (G and VT,
    P, standard, ...; on-demand and spot apart) in one region, a GCP GPU type in one region, GCP's
    GPUS_ALL_REGIONS for GPU offers everywhere. Empty fields match everything."""

    cloud: str
    region: str = ""                # "": every region (a global quota)
    market: str = ""                # "spot" | "on-demand" | "": both
    gpu_only: bool = False          # only offers with a GPU draw on it
    accelerator: str = ""           # one GPU type (canonical name, e.g. T4)
    families: tuple[str, ...] = ()  # instance classes drawing on it: the letters of an AWS family (g, vt, p)
    quota: str = ""                 # the cloud's name of the quota (L-DB2E81BA, NVIDIA_T4_GPUS), for messages

    def key(self) -> str:
        """A string for the run loop's set of blocked things (see planner.quota_blocked)."""
        return "quota:" + json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_key(cls, key: str) -> "QuotaScope | None":
        if not key.startswith("quota:"):
            return None
        data = json.loads(key[len("quota:"):])
        return cls(**{**data, "families": tuple(data.get("families") or ())})

    def matches(self, offer, spot: bool) -> bool:
        if offer.cloud != self.cloud or (self.region and offer.region != self.region):
            return False
        if self.market and self.market != ("spot" if spot else "on-demand"):
            return False
        if (self.gpu_only or self.accelerator) and not offer.accelerator:
            return False
        if self.accelerator:
            if canonical_gpu(offer.accelerator) != canonical_gpu(self.accelerator):
                return False
        return not self.families or instance_class(offer.instance_type) in self.families


def instance_class(instance_type: str) -> str:
    """The letters that open an instance family: g4dn.xlarge -> g, inf2.xlarge -> inf, vt1.3xlarge -> vt;
    a GCE machine type's series, which its CPU quota is per: n1-standard-8 -> n1, n2d-standard-2 -> n2d."""
    if "." not in instance_type and "-" in instance_type:  # GCE: SERIES-KIND-SIZE
        return instance_type.split("-", 1)[0].lower()
    family = instance_type.split(".", 1)[0].lower()
    letters = re.match(r"[a-z]+", family)
    return letters.group() if letters else family


class QuotaError(ProviderError):
    """Quota exhausted: block what draws on that quota (`quota`, when the cloud says which), else the
    region (or the cloud, when the quota is global)."""

    scope = "region"

    def __init__(self, message: str, *, global_quota: bool = False, quota: QuotaScope | None = None, **kw):
        super().__init__(message, **kw)
        self.quota = quota
        if quota is not None:
            self.scope = "quota"
        elif global_quota:
            self.scope = "cloud"


class CredentialsError(ProviderError):
    """Credentials missing or refused: block the whole cloud; the message says how to fix it."""

    scope = "cloud"


class ProvisionError(ProviderError):
    """Anything else that went wrong while provisioning."""

    scope = "offer"


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the orchestrator asks these instead of comparing backend names."""

    remote: bool      # nodes elsewhere: code ships as working_dir, the head is reached by connect()
    spot: bool        # has a spot/preemptible market
    multi_node: bool  # a cluster may span several nodes
    billed: bool      # node-seconds cost money; nodes are watched for preemption
    regional: bool    # offers are per region (the job's `regions:` filter applies)
    provisioned: bool = True  # dlrun boots the nodes (image, driver, torch wheels); False: they run what they have
    containers: bool = False  # runs a job's `image:` (infra/images; a VM's boot: infra/vm/container_boot.py)


class Connection:
    """How the client reaches a head's Jobs API: `address` (http://127.0.0.1:PORT) with `headers`
    (the cluster's Ray auth token); close() when done."""

    def __init__(self, address: str, on_close=None, headers: dict[str, str] | None = None):
        self.address, self._on_close, self.headers = address, on_close, dict(headers or {})

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class BootstrapConfig:
    """What a fresh node needs to join the cluster; never holds secrets."""

    ray_version: str
    python_packages: list[str] = field(default_factory=list)
    ray_port: int = 6379
    dashboard_port: int = 8265
    heartbeat_timeout_s: int = 900  # a node powers itself off after this long without dlrun's heartbeat
    max_run_s: int = 0              # ... and unconditionally after this long (0: no hard limit)
    # the planned software (orchestrator/planning/software.py): torch from its wheel index, and the GPUs
    # the boot must see before Ray starts (0: a CPU offer, no check)
    torch_requirement: str = ""     # e.g. torch==2.13.0; empty: plain `torch` from the default index
    torch_index_url: str | None = None
    gpu_count: int = 0
    gpu_memory_gb: float = 0.0
    # where a node's packages come from (config.yaml `mirrors:`; corporate and air-gapped networks): a PEP 503
    # index (empty: PyPI) for uv itself and every package; torch's index above is already the mirrored one
    pip_index_url: str = ""
    root_volume_gb: int = 0         # the node's root disk, sized from the plan (0: the image's default)
    # shell commands the watchdog runs to end this node before it powers off, for clouds where a guest
    # power-off only stops the instance (GCE: the node deletes itself); empty: power-off is the end
    self_end: str = ""
    # a job's `image:` (infra/vm/container_boot.py): the Ray node runs in it; registry credentials are handed
    # over SSH with the Ray token, never put here
    container_image: str = ""       # fully qualified reference; empty: no image, Ray in a venv on the node
    container_pull: str = "if-missing"  # always | if-missing (the job file's image_pull)
    container_insecure: bool = False  # the registry answers plain HTTP (localhost or DLRUN_INSECURE_REGISTRIES)
    apt_mirror: str = ""            # config.yaml mirrors.apt: where a node without podman/docker gets podman


@dataclass
class ClusterRequest:
    cluster_id: str
    job_id: str
    offer: Offer
    spot: bool
    num_nodes: int = 1
    bootstrap: BootstrapConfig | None = None
    ssh_cidr: str | None = None  # caller's address for SSH ingress; discovered when None
    image: str | None = None
    owner: str = ""
    storage: str = ""  # bucket URL (s3://, gs://) the nodes may read/write: scoped node credentials
    data_read: tuple = ()  # bucket URLs the nodes may also read (the job's data inputs)
    data_uploads: tuple = ()  # (local dir, manifest URL, manifest) to upload before launch (once)
    progress: Callable[[str], None] | None = None  # what a launch says while it waits (a slow head start)


@dataclass
class Node:
    node_id: str
    private_ip: str = ""
    public_ip: str = ""
    zone: str = ""
    is_head: bool = False


@dataclass
class Cluster:
    cluster_id: str
    provider: str
    region: str
    zone: str
    instance_type: str
    spot: bool
    price_per_hour: float  # per node, the price used at launch (stored with it)
    nodes: list[Node] = field(default_factory=list)
    job_id: str = ""
    launched_at: float = field(default_factory=time.time)
    # how the client reaches the head's Jobs API / dashboard (local: direct; cloud: SSH tunnel)
    head_address: str = ""
    ssh_user: str = ""
    ssh_key_path: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def head(self) -> Node | None:
        return next((n for n in self.nodes if n.is_head), self.nodes[0] if self.nodes else None)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Cluster":
        d = dict(d)
        d["nodes"] = [Node(**n) for n in d.get("nodes", [])]
        return cls(**d)


@dataclass
class NodeState:
    node_id: str
    status: NodeStatus
    reason: str = ""


class Provider(ABC):
    """The contract every backend implements (local, aws, gcp, cluster), and what `infra.get_provider`
    returns. The abstract methods are what a backend must say for itself; the concrete ones are defaults
    a backend overrides only when it has something to do there, so callers never ask whether it has them."""

    name: str = ""
    capabilities: Capabilities

    @abstractmethod
    def offers(self) -> list[Offer]:
        """The planner's candidates on this backend (this machine's GPUs/CPU, or catalog rows)."""

    @abstractmethod
    def launch(self, request: ClusterRequest) -> Cluster:
        """Start (or find, when already started: idempotent by cluster id) the cluster's nodes."""

    @abstractmethod
    def connect(self, cluster: Cluster) -> Connection:
        """The head's Ray dashboard / Jobs API as a local address: direct, or through an SSH tunnel."""

    @abstractmethod
    def status(self, cluster: Cluster) -> list[NodeState]:
        """Each node's state: running / preempted / gone ..."""

    @abstractmethod
    def terminate(self, cluster: Cluster) -> None:
        """Remove every resource of the cluster; safe to call twice."""

    @abstractmethod
    def list_owned(self) -> list[Cluster]:
        """Every cluster with dlrun's tags/labels that is still there (for `dlrun down --orphans`)."""

    def preflight(self) -> None:  # noqa: B027  (a no-op default on purpose: most backends need no check)
        """Raise the error that would make every launch here fail (credentials, settings), if any."""

    def heartbeat(self, cluster: Cluster) -> None:  # noqa: B027  (a no-op default on purpose: no watchdog)
        """Keep the cluster's watchdog from powering its nodes off: dlrun still watches (none by default)."""

    def kept_resources(self) -> list[str]:
        """What `dlrun down --orphans` lists and leaves on purpose (e.g. dlrun's VPC), one line each."""
        return []

    def submission_extras(self, offer: Offer, workers: int, cluster: Cluster) -> dict:
        """What the job's Ray submission needs besides its entrypoint on this backend (entrypoint resources,
        metadata, runtime_env additions); {} where dlrun's own cluster runs one job."""
        return {}

    def clear_run_prefix(self, owner: str, relative: str) -> dict[str, list[str]]:
        """`--fresh`: remove runs/<relative>/ in `owner`'s dlrun buckets of this backend; {prefix URL: the
        names removed}. {} where the backend has no buckets of dlrun's."""
        return {}
