"""The node service account a storage launch makes (one per cluster) goes with the cluster, bindings
first: on terminate, on a failed launch, and through `dlrun down --orphans` when dlrun was killed after
making it and before any instance; another owner's, a live job's and an account dlrun did not name are
left. Real GcpProvider, IAM over REST and google-cloud-storage against tests/support (GCE, GCS + IAM)."""
from __future__ import annotations

from dataclasses import replace

import pytest
from google.auth.credentials import AnonymousCredentials

from infra.base import CapacityError
from infra.gcp import storage
from infra.gcp.iam import IamApi
from infra.gcp.provider import GcpProvider
from orchestrator.runs.teardown import remove_orphans
from orchestrator.state.db import Store
from tests.support.gcs_server import FakeGcs
from tests.support.gcp_provider import (  # noqa: F401
    CALLER, US_CENTRAL1, assert_nothing_left, gce, no_address_lookup, request)

OWNER = "alice"
BUCKET = storage.run_bucket_name(OWNER, "us-central1")
RUN_URL = f"{storage.run_bucket_url(OWNER, 'us-central1')}/digits/0123abcd"


@pytest.fixture
def gcs(gce):
    with FakeGcs(project=gce.project) as fake:
        yield fake


def new_provider(gce, gcs):
    return GcpProvider(project=gce.project, api_endpoint=gce.endpoint, ssh_cidr=CALLER,
                       storage_endpoint=gcs.endpoint, iam_endpoint=gcs.endpoint)


def launch(provider, cluster_id, owner=OWNER, **kw):
    return provider.launch(replace(request(cluster_id, storage=RUN_URL, **kw), job_id=f"job-{cluster_id}", owner=owner))


def email_of(gce, cluster_id):
    return storage.account_email(storage.account_id(cluster_id), gce.project)


def bound(gcs) -> set[str]:
    """The accounts named in the run bucket's policy."""
    return {m.split(":", 1)[1] for b in gcs.policies.get(BUCKET, {}).get("bindings", []) for m in b["members"]
            if m.startswith("serviceAccount:")}


def orphans(gce, gcs, store, **kw):
    return remove_orphans(store, clouds=["gcp"], providers={"gcp": new_provider(gce, gcs)}, owner=OWNER, **kw)


def test_terminate_removes_the_clusters_account_and_its_bindings(gce, gcs):
    provider = new_provider(gce, gcs)
    first, second = launch(provider, "a1", spot=True), launch(provider, "a2", spot=True)
    assert set(gcs.accounts) == bound(gcs) == {email_of(gce, "a1"), email_of(gce, "a2")}
    record = storage.parse_description(gcs.accounts[email_of(gce, "a1")]["description"])
    assert record == {"dlrun": "node", "cluster": "a1", "job": "job-a1", "region": "us-central1",
                      "bucket": BUCKET, "owner": OWNER}
    provider.terminate(first)
    assert set(gcs.accounts) == bound(gcs) == {email_of(gce, "a2")}  # the other cluster keeps its own
    provider.terminate(second)
    assert gcs.accounts == {} and bound(gcs) == set()
    assert not any(m.startswith("deleted:") for b in gcs.policies[BUCKET]["bindings"] for m in b["members"])


def test_a_launch_that_fails_everywhere_removes_its_account(gce, gcs):
    gce.stockout(*US_CENTRAL1)
    with pytest.raises(CapacityError):
        launch(new_provider(gce, gcs), "full", spot=True)
    assert gcs.accounts == {} and bound(gcs) == set()
    assert_nothing_left(gce, "full")


def test_killed_after_the_account_before_any_instance_leaves_nothing_after_down_orphans(gce, gcs, tmp_path,
                                                                                     monkeypatch):
    crashing = new_provider(gce, gcs)

    def killed(region):
        raise SystemExit("killed")  # the process dies right after the account and its bindings: no cleanup
    monkeypatch.setattr(crashing, "_ensure_network", killed)
    with pytest.raises(SystemExit):
        launch(crashing, "killed", spot=True)
    assert list(gcs.accounts) == [email_of(gce, "killed")] and bound(gcs) == {email_of(gce, "killed")}
    assert gce.instances == {} and gce.firewalls == {}

    (orphan,) = new_provider(gce, gcs).list_owned()
    assert (orphan.cluster_id, orphan.job_id, orphan.region, orphan.nodes) == ("killed", "job-killed", "us-central1", [])
    assert orphan.extra["owner"] == OWNER and orphan.extra["node_account"] == email_of(gce, "killed")
    out = orphans(gce, gcs, Store(tmp_path / "s.db"))
    assert out == ["removed orphan gcp cluster killed (job job-killed)"]
    assert gcs.accounts == {} and bound(gcs) == set()
    assert new_provider(gce, gcs).list_owned() == []


def test_orphans_leave_other_owners_live_jobs_and_accounts_dlrun_did_not_name(gce, gcs, tmp_path):
    provider = new_provider(gce, gcs)
    launch(provider, "live")
    launch(provider, "gone")
    launch(provider, "bobs", owner="bob@desk")  # a teammate whose job names this bucket
    iam = IamApi(AnonymousCredentials(), gce.project, gcs.endpoint)
    handmade = iam.ensure_service_account("dlrun-handmade", display_name="x", description=storage.account_description(
        cluster_id="gone", job_id="job-gone", region="us-central1", bucket=BUCKET, owner=OWNER))
    store = Store(tmp_path / "s.db")
    store.create_job(name="t", spec_hash="h", spec_json="{}", job_id="job-live")  # PENDING: live
    out = orphans(gce, gcs, store)
    assert "removed orphan gcp cluster gone (job job-gone)" in out
    assert any(line.startswith("left gcp cluster bobs: owned by bob") for line in out)
    assert set(gcs.accounts) == {email_of(gce, "bobs"), email_of(gce, "live"), handmade}
    assert email_of(gce, "gone") not in bound(gcs)


def test_the_account_search_pages_and_is_bounded(gce, gcs):
    iam = IamApi(AnonymousCredentials(), gce.project, gcs.endpoint)
    for i in range(5):
        iam.ensure_service_account(storage.account_id(f"c{i}"), display_name="n", description=storage.account_description(
            cluster_id=f"c{i}", job_id="j", region="r", bucket=BUCKET, owner=OWNER))
    iam.ensure_service_account("someone-elses", display_name="n", description="a teammate's account")
    assert len(iam.list(limit=100, page_size=2)) == 6  # three pages
    assert sorted(r["cluster"] for r in storage.list_node_accounts(iam, limit=100).values()) == [f"c{i}" for i in range(5)]
    assert len(storage.list_node_accounts(iam, limit=3)) == 3  # the first three looked at are dlrun's
    assert len([p for m, p, *_ in gcs.requests if m == "GET" and p.endswith("/serviceAccounts")]) == 5


def test_a_long_owner_still_fits_the_description(gce):
    text = storage.account_description(cluster_id="c" * 40, job_id="j" * 30, region="us-central1", bucket=BUCKET,
                                       owner="o" * 500)
    assert len(text) <= storage.DESCRIPTION_MAX and storage.parse_description(text)["cluster"] == "c" * 40
