"""What every VM cloud shares: the launch skeleton, the SSH connection to the head, teardown's local part, offers.

A cloud subclasses VmProvider and supplies the SDK calls (the abstract methods below). The skeleton owns the
order and the guarantees: nothing is created before the SSH source address is known; zones are tried in order
and a stockout only removes what was made in that zone; any other failure (or Ctrl-C) removes everything this
launch created before the error is raised, mapped to the provider error the executor acts on. Teardown ends
SSH to the cluster first, lets the cloud remove its resources, then forgets the cluster on this machine (its
SSH key, known_hosts and Ray token) once, for every cloud.
"""
from __future__ import annotations

import logging
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from infra.base import (BootstrapConfig, CapacityError, Cluster, ClusterRequest, Connection, NodeState, Provider,
                        ProviderError, ProvisionError)
from infra.catalog import Offer
from infra.vm.network import resolve_ssh_cidr

log = logging.getLogger(__name__)


@dataclass
class Created:
    """What one launch made, so a failure removes exactly that (and a retry finds nothing half-made)."""

    region: str = ""
    instances: list = field(default_factory=list)  # (zone, the cloud's instance id/name) of each node made
    firewalls: list[str] = field(default_factory=list)  # AWS security group ids / GCE firewall names
    key: str = ""  # set when this launch made the cluster's SSH key (AWS: the key pair's name)
    identity: str = ""  # the node role / service account this launch made for its cluster


@dataclass
class Found:
    """A cluster found by its tags: `complete` when every node is there; `zones` where it lives."""

    cluster: Cluster | None
    complete: bool
    zones: list[str] = field(default_factory=list)
    instances: dict = field(default_factory=dict)  # zone -> the cloud's instances there


@dataclass
class Prepared:
    """What prepare() made ready for launch_in_zone, the same in every zone; each cloud adds its own fields."""

    cfg: BootstrapConfig  # the boot script's settings, with what this cloud's nodes need added


P = TypeVar("P", bound=Prepared)


class VmProvider(Provider, Generic[P]):
    ssh_cidr: str | None = None

    def offers(self) -> list[Offer]:
        from infra.catalog import load_offers

        return [o for o in load_offers() if o.cloud == self.name]

    def preflight(self) -> None:
        """Raise what would make every launch here fail (no credentials, no SSH source address),
        before anything is created."""
        resolve_ssh_cidr(self.ssh_cidr, cloud=self.name)
        try:
            self.check_credentials()
        except ProviderError:
            raise
        except Exception as e:
            raise self.to_provider_error(e) from None

    # ---------------------------------------------------------------- the launch skeleton
    def launch(self, request: ClusterRequest) -> Cluster:
        """Start the cluster's nodes, or return them when this cluster id already has them."""
        region = request.offer.region
        if request.num_nodes < 1:
            raise ProvisionError("a cluster needs at least one node", cloud=self.name, region=region)
        ssh_cidr = resolve_ssh_cidr(request.ssh_cidr, self.ssh_cidr, cloud=self.name)  # before any call
        from infra.vm.ssh import allow_ssh

        allow_ssh(request.cluster_id)  # a cluster id torn down before in this process lives again
        try:
            self.check_region(region)
            existing = self.find(request)
        except Exception as e:
            raise self.to_provider_error(e, region=region) from None
        if existing is not None and existing.complete and existing.cluster is not None:
            return self._described(existing.cluster, request)
        created = Created(region=region)
        try:
            return self._described(self._launch(request, ssh_cidr, existing, created), request)
        except (Exception, KeyboardInterrupt) as e:
            self._safe_cleanup(request.cluster_id, created)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise self.to_provider_error(e, region=region, what=request.offer.instance_type) from None

    def _launch(self, request: ClusterRequest, ssh_cidr: str, existing: Found | None, created: Created) -> Cluster:
        region, what = request.offer.region, request.offer.instance_type
        prepared = self.prepare(request, ssh_cidr, created)
        zones = existing.zones if existing is not None and existing.zones else self.launch_zones(request)
        failures: list[str] = []
        for zone in zones:
            try:
                return self.launch_in_zone(request, zone, prepared, existing, created)
            except Exception as e:
                err = self.to_provider_error(e, region=region, zone=zone, what=what)
                if not isinstance(err, CapacityError):
                    raise err from None
                failures.append(f"{zone}: {err.message}")
                self.undo_zone(created, zone)
        market = "spot" if request.spot else "on-demand"
        raise CapacityError(f"no {market} capacity for {what} in any zone of {region} "
                            f"({'; '.join(failures) or 'no zones'})", cloud=self.name, region=region)

    def launch_zones(self, request: ClusterRequest) -> list[str]:
        """The region's zones in launch order: for spot, the order the estimate was priced with."""
        from infra.spot_zones import launch_order

        region = request.offer.region
        ranking = request.offer.extra.get("spot_zones") if request.spot else None
        return launch_order(self.zones_for(request), ranking, self.zone_ids(region) if ranking else None)

    @staticmethod
    def _described(cluster: Cluster, request: ClusterRequest) -> Cluster:
        """What connect() checks before a job may start: every node's GPUs joined; and the job's image, whose
        registry credentials connect() hands over with the Ray token."""
        cluster.extra.setdefault("gpus_per_node", request.offer.accelerator_count)
        if request.bootstrap and request.bootstrap.container_image:
            cluster.extra.setdefault("container_image", request.bootstrap.container_image)
        return cluster

    def _safe_cleanup(self, cluster_id: str, created: Created) -> None:
        """Best effort, never hiding the launch's own error: `dlrun down --orphans` finds the rest."""
        from infra.vm.keys import remove_cluster_key

        made_key = bool(created.key)  # this launch made the cluster's key: nothing else will use it
        try:
            self.cleanup(cluster_id, created)
            if made_key:
                remove_cluster_key(cluster_id)
        except (Exception, KeyboardInterrupt) as e:
            log.warning("cleanup after a failed launch of %s was incomplete: %s", cluster_id, e)

    # ---------------------------------------------------------------- reaching the head
    def connect(self, cluster: Cluster) -> Connection:
        """The head's dashboard through an SSH tunnel, once every node booted and joined Ray.

        A node that cannot be reached, failed its boot script or never joined raises ProvisionError
        (with the boot log's last lines): the caller tears the cluster down and tries the next offer.
        """
        from infra.auth import bearer, ensure_token
        from infra.reach import wait_dashboard
        from infra.vm import ready
        from infra.vm.ssh import open_tunnel

        token = ensure_token(cluster.cluster_id)
        ready.wait_booted(cluster, token=token, registry_auth=ready.registry_auth(cluster))
        tunnel = open_tunnel(cluster, 8265)
        try:
            wait_dashboard(tunnel.local_address, timeout=120, what=f"the Ray head of {cluster.cluster_id}",
                           cloud=self.name)
            ready.wait_joined(cluster, tunnel.local_address, headers=bearer(token),
                              gpus_per_node=int(cluster.extra.get("gpus_per_node", 0)))
        except BaseException:
            tunnel.close()
            raise
        return Connection(tunnel.local_address, tunnel.close, headers=bearer(token))

    def heartbeat(self, cluster: Cluster) -> None:
        from infra.vm import ready

        ready.heartbeat(cluster)

    # ---------------------------------------------------------------- teardown
    def terminate(self, cluster: Cluster) -> None:
        """SSH to the cluster ends first (nothing may reach its nodes or write its known_hosts from now on),
        then the cloud removes the cluster's resources, then this machine forgets it: its SSH key,
        known_hosts and Ray token. A cloud failure raises before the local part: a retry still has the key."""
        from infra.auth import remove_token
        from infra.vm.keys import remove_cluster_key
        from infra.vm.ssh import end_ssh, forget_host_keys

        end_ssh(cluster.cluster_id)
        self.remove_cluster(cluster)
        remove_cluster_key(cluster.cluster_id)
        forget_host_keys(cluster.cluster_id)
        remove_token(cluster.cluster_id)

    # ---------------------------------------------------------------- what a cloud may override
    def check_region(self, region: str) -> None:
        """Raise when this provider cannot work in region (before anything is created)."""

    def zones_for(self, request: ClusterRequest) -> list[str]:
        """The zones to try for this request, in order (a cloud may skip zones that lack the offer)."""
        return self.zones(request.offer.region)

    def zone_ids(self, region: str) -> dict[str, str]:
        """Zone name -> the cloud's account-independent zone ID, where the cloud has one."""
        return {}

    # ---------------------------------------------------------------- what a cloud supplies
    @abstractmethod
    def check_credentials(self) -> None:
        """One cheap call that fails the way every launch would without a usable login."""

    @abstractmethod
    def to_provider_error(self, e: BaseException, **where) -> ProviderError:
        """The SDK's exception as the provider error the run loop acts on (`where`: region, zone, what ...)."""

    @abstractmethod
    def find(self, request: ClusterRequest) -> Found | None:
        """This cluster id's nodes, when an earlier launch made some (launch is idempotent by cluster id)."""

    @abstractmethod
    def zones(self, region: str) -> list[str]:
        """The region's zones, in dlrun's order."""

    @abstractmethod
    def prepare(self, request: ClusterRequest, ssh_cidr: str, created: Created) -> P:
        """Everything a launch needs in any zone (firewall, key, image, node identity), noted in `created`."""

    @abstractmethod
    def launch_in_zone(self, request: ClusterRequest, zone: str, prepared: P, existing: Found | None,
                       created: Created) -> Cluster:
        """The nodes in one zone, head first; a stockout raises what to_provider_error maps to CapacityError."""

    @abstractmethod
    def undo_zone(self, created: Created, zone: str) -> None:
        """Remove what this launch made in `zone` (before the next zone is tried)."""

    @abstractmethod
    def cleanup(self, cluster_id: str, created: Created) -> None:
        """Remove in the cloud everything this launch made (a failed launch); the local key is the base's."""

    @abstractmethod
    def status(self, cluster: Cluster) -> list[NodeState]:
        """Each node's state, telling a preemption from dlrun's own termination."""

    @abstractmethod
    def remove_cluster(self, cluster: Cluster) -> None:
        """Remove every cloud resource of the cluster (by id and by tag/label); safe to call twice. Raises
        the mapped provider error; terminate() does the local part after it."""

    @abstractmethod
    def list_owned(self) -> list[Cluster]:
        """Every cluster with dlrun's tags/labels in this cloud, and leftovers of half-made ones."""


def local_ray_version(cloud: str = "") -> str:
    """The Ray version the nodes must run: the client's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        raise ProvisionError("Ray is not installed here; the cluster must run the client's Ray "
                             "version, so install ray first", cloud=cloud) from None
