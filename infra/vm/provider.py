"""What every VM cloud shares: the launch skeleton, the SSH connection to the head, offers, capabilities.

A cloud subclasses VmProvider and supplies the SDK calls (find, prepare, launch_in_zone, undo_zone,
cleanup, to_provider_error, status, terminate, list_owned). The skeleton owns the order and the
guarantees: nothing is created before the SSH source address is known; zones are tried in order and a
stockout only removes what was made in that zone; any other failure (or Ctrl-C) removes everything
this launch created before the error is raised, mapped to the provider error the executor acts on.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from infra.base import CapacityError, Cluster, ClusterRequest, Connection, ProviderError, ProvisionError
from infra.catalog import Offer
from infra.vm.network import resolve_ssh_cidr

log = logging.getLogger(__name__)


@dataclass
class Created:
    """What one launch made, so a failure removes exactly that (and a retry finds nothing half-made)."""

    region: str = ""
    instances: list = field(default_factory=list)  # the cloud's instance handles, with their zone
    firewalls: list[str] = field(default_factory=list)  # AWS security group ids / GCE firewall names
    key: str = ""  # the cloud-side name of a key this launch registered
    identity: str = ""  # the node role / service account this launch made for its cluster


class VmProvider:
    name = ""
    ssh_cidr: str | None = None

    @property
    def capabilities(self):
        from infra import capabilities

        return capabilities(self.name)

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

    def check_credentials(self) -> None:
        raise NotImplementedError

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
        if existing is not None and existing.complete:
            return self._described(existing.cluster, request)
        created = Created(region=region)
        try:
            return self._described(self._launch(request, ssh_cidr, existing, created), request)
        except (Exception, KeyboardInterrupt) as e:
            self._safe_cleanup(request.cluster_id, created)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise self.to_provider_error(e, region=region, what=request.offer.instance_type) from None

    def _launch(self, request: ClusterRequest, ssh_cidr: str, existing, created: Created) -> Cluster:
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

    def zone_ids(self, region: str) -> dict[str, str]:
        """Zone name -> the cloud's account-independent zone ID, where the cloud has one."""
        return {}

    @staticmethod
    def _described(cluster: Cluster, request: ClusterRequest) -> Cluster:
        """What connect() checks before a job may start: every node's GPUs joined."""
        cluster.extra.setdefault("gpus_per_node", request.offer.accelerator_count)
        return cluster

    def _safe_cleanup(self, cluster_id: str, created: Created) -> None:
        """Best effort, never hiding the launch's own error: `dlrun down --orphans` finds the rest."""
        try:
            self.cleanup(cluster_id, created)
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
        ready.wait_booted(cluster, token=token)
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

    def submission_extras(self, offer: Offer, workers: int, cluster: Cluster) -> dict:
        """The cluster is the job's own: Ray places it without asking."""
        return {}

    def heartbeat(self, cluster: Cluster) -> None:
        from infra.vm import ready

        ready.heartbeat(cluster)

    # ---------------------------------------------------------------- what a cloud supplies
    def check_region(self, region: str) -> None:
        """Raise when this provider cannot work in region (before anything is created)."""

    def find(self, request: ClusterRequest) -> "Found | None":
        raise NotImplementedError

    def zones(self, region: str) -> list[str]:
        raise NotImplementedError

    def zones_for(self, request: ClusterRequest) -> list[str]:
        """The zones to try for this request, in order (a cloud may skip zones that lack the offer)."""
        return self.zones(request.offer.region)

    def prepare(self, request: ClusterRequest, ssh_cidr: str, created: Created):
        """Firewall/group and key; returns what launch_in_zone needs."""
        raise NotImplementedError

    def launch_in_zone(self, request: ClusterRequest, zone: str, prepared, existing, created: Created) -> Cluster:
        raise NotImplementedError

    def undo_zone(self, created: Created, zone: str) -> None:
        raise NotImplementedError

    def cleanup(self, cluster_id: str, created: Created) -> None:
        raise NotImplementedError

    def to_provider_error(self, e: BaseException, **where) -> ProviderError:
        raise NotImplementedError


@dataclass
class Found:
    """A cluster found by its tags: `complete` when every node is there; `zones` where it lives."""

    cluster: Cluster | None
    complete: bool
    zones: list[str] = field(default_factory=list)
    instances: dict = field(default_factory=dict)


def local_ray_version(cloud: str = "") -> str:
    """The Ray version the nodes must run: the client's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        raise ProvisionError("Ray is not installed here; the cluster must run the client's Ray "
                             "version, so install ray first", cloud=cloud) from None
