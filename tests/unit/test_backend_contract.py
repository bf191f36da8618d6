"""The backend contract is a type: every registered backend's class is a concrete infra.base.Provider (no
abstract method left), its capabilities are the registry's, and VmProvider does a cluster's local clean-up
(SSH key, known_hosts, Ray token) once, after the cloud's part. No SDK client is constructed here."""
from __future__ import annotations

import inspect

import pytest

import infra
from infra.base import Cluster, ClusterRequest, NodeState, Provider, ProviderError
from infra.catalog import Offer
from infra.vm.provider import Created, Found, Prepared, VmProvider


@pytest.mark.parametrize("name", infra.BACKEND_NAMES)
def test_every_registered_backend_is_a_concrete_provider(name):
    cls = infra.provider_class(name)
    assert issubclass(cls, Provider)
    assert not inspect.isabstract(cls), f"{cls.__name__} leaves {sorted(cls.__abstractmethods__)} abstract"
    assert cls.capabilities == infra.capabilities(name)
    assert cls.name == name


def test_the_cloud_backends_share_the_vm_skeleton():
    assert issubclass(infra.provider_class("aws"), VmProvider)
    assert issubclass(infra.provider_class("gcp"), VmProvider)
    assert inspect.isabstract(VmProvider) and inspect.isabstract(Provider)


def test_a_registry_entry_that_is_not_a_provider_is_refused(monkeypatch):
    monkeypatch.setitem(infra.BACKENDS, "local", ("infra.base:Connection", infra.capabilities("local")))
    with pytest.raises(TypeError, match="not an infra.base.Provider"):
        infra.provider_class("local")


def test_a_provider_missing_part_of_the_contract_cannot_be_made():
    class Partial(Provider):
        name = "partial"

        def offers(self) -> list[Offer]:
            return []

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]


class OneCloud(VmProvider[Prepared]):
    """The cloud side of a VmProvider (the boundary): records what the skeleton asks of it."""

    name = "aws"
    capabilities = infra.capabilities("aws")

    def __init__(self, fail_removal: bool = False):
        self.fail_removal, self.removed = fail_removal, []

    def remove_cluster(self, cluster: Cluster) -> None:
        self.removed.append(cluster.cluster_id)
        if self.fail_removal:
            raise ProviderError("the cloud refused", cloud=self.name)

    def check_credentials(self) -> None:
        pass

    def to_provider_error(self, e: BaseException, **where) -> ProviderError:
        return ProviderError(str(e))

    def find(self, request: ClusterRequest) -> Found | None:
        return None

    def zones(self, region: str) -> list[str]:
        return []

    def prepare(self, request, ssh_cidr, created) -> Prepared:
        raise AssertionError("nothing is launched here")

    def launch_in_zone(self, request, zone, prepared, existing, created) -> Cluster:
        raise AssertionError("nothing is launched here")

    def undo_zone(self, created: Created, zone: str) -> None:
        pass

    def cleanup(self, cluster_id: str, created: Created) -> None:
        pass

    def status(self, cluster: Cluster) -> list[NodeState]:
        return []

    def list_owned(self) -> list[Cluster]:
        return []

def _local_traces(cluster_id: str):
    from infra.auth import ensure_token, token_path
    from infra.vm.keys import ensure_cluster_key, key_path
    from infra.vm.ssh import known_hosts_path

    ensure_cluster_key(cluster_id)
    ensure_token(cluster_id)
    known_hosts_path(cluster_id).write_text("203.0.113.10 ssh-ed25519 AAAA\n")
    return [key_path(cluster_id), token_path(cluster_id), known_hosts_path(cluster_id)]


def _cluster(cluster_id: str) -> Cluster:
    return Cluster(cluster_id=cluster_id, provider="aws", region="us-east-1", zone="us-east-1a",
                   instance_type="c7i.large", spot=False, price_per_hour=0.1)


def test_terminate_forgets_the_cluster_here_after_the_cloud_removed_it():
    traces = _local_traces("c-1")
    assert all(p.exists() for p in traces)
    cloud = OneCloud()
    cloud.terminate(_cluster("c-1"))
    assert cloud.removed == ["c-1"]
    assert not any(p.exists() for p in traces)


def test_a_failed_cloud_removal_keeps_the_key_for_the_next_try():
    traces = _local_traces("c-2")
    with pytest.raises(ProviderError, match="refused"):
        OneCloud(fail_removal=True).terminate(_cluster("c-2"))
    assert all(p.exists() for p in traces)
