"""What a GCP launch needs for checkpoints in Cloud Storage: the bucket (dlrun's own is created on first
use), the node service account bound to the run's prefix, and google-cloud-storage on the node."""
from __future__ import annotations

from infra.base import ProvisionError
from infra.gcp import storage



def storage_client(credentials, project: str, endpoint: str | None):
    from google.cloud import storage as gcs

    options = {"api_endpoint": endpoint} if endpoint else None
    return gcs.Client(project=project, credentials=credentials, client_options=options)


def prepare_storage(credentials, project: str, url: str, *, region: str, owner: str, cluster_id: str,
                    job_id: str = "", storage_endpoint: str | None = None, iam_endpoint: str | None = None) -> str:
    """The service account email for a run stored at `url` (gs:// only); makes dlrun's run bucket if it is the one."""
    from google.api_core.exceptions import Forbidden

    from infra.gcp.iam import IamApi, IamError

    if not url.startswith("gs://"):
        raise ProvisionError(f"checkpoint {url} is not in Cloud Storage: GCP nodes get credentials for "
                             "Cloud Storage only; use gs://BUCKET/PREFIX", cloud="gcp", region=region)
    bucket, prefix = storage.split_url(url)
    client = storage_client(credentials, project, storage_endpoint)
    try:
        if bucket == storage.run_bucket_name(owner, region):
            storage.ensure_run_bucket(client, bucket, region, owner)
        return storage.ensure_node_account(IamApi(credentials, project, iam_endpoint), client, bucket, prefix, owner,
                                           cluster_id=cluster_id, job_id=job_id, region=region)
    except Forbidden:
        raise ProvisionError(f"the Cloud Storage bucket {bucket} is not this project's or this login may not "
                             "manage it: set checkpoint: gs://YOUR-BUCKET/PREFIX in the job file, or ask for "
                             "roles/storage.admin on it", cloud="gcp", region=region) from None
    except IamError as e:
        raise ProvisionError(f"cannot make the node service account in project {project} ({e}): dlrun needs "
                             "roles/iam.serviceAccountAdmin there", cloud="gcp", region=region) from None


def prepare_node_account(credentials, project: str, *, region: str, owner: str, cluster_id: str, job_id: str = "",
                         iam_endpoint: str | None = None) -> str:
    """The cluster's node account (email) without any bucket: a run without a gs:// checkpoint. Its only
    grants are the ones launch gives it on its own instances (self-deletion)."""
    from infra.gcp.iam import IamApi, IamError

    iam = IamApi(credentials, project, iam_endpoint)
    try:
        return iam.ensure_service_account(
            storage.account_id(cluster_id), display_name=f"dlrun node {cluster_id}"[:100],
            description=storage.account_description(cluster_id=cluster_id, job_id=job_id, region=region,
                                                    bucket="", owner=owner))
    except IamError as e:
        raise ProvisionError(f"cannot make the node service account in project {project} ({e}): dlrun needs "
                             "roles/iam.serviceAccountAdmin there", cloud="gcp", region=region) from None


MAX_LISTED_ACCOUNTS = 1000  # the orphan search looks at no more (a project holds 100 by default)


def remove_node_account(credentials, project: str, email: str, storage_endpoint: str | None = None,
                        iam_endpoint: str | None = None) -> bool:
    """The cluster's node account and its bindings on the run bucket, once its instances are gone."""
    from infra.gcp.iam import IamApi

    return storage.remove_node_account(IamApi(credentials, project, iam_endpoint), storage_client(
        credentials, project, storage_endpoint), email)


def leftover_node_accounts(credentials, project: str, *, iam_endpoint: str | None = None) -> dict[str, dict]:
    """{email: description record} of the node accounts dlrun made in `project`."""
    import logging

    from infra.gcp.iam import IamApi, IamError

    try:
        return storage.list_node_accounts(IamApi(credentials, project, iam_endpoint), MAX_LISTED_ACCOUNTS)
    except IamError as e:
        if e.status != 403:
            raise
        # a login that may not list accounts made none either; the rest of `down --orphans` must still run
        logging.getLogger(__name__).warning("node service accounts not searched: %s", e)
        return {}


def clear_run_prefix(credentials, project: str, owner: str, relative: str,
                     storage_endpoint: str | None = None) -> dict[str, list[str]]:
    """`--fresh`: every object under runs/<relative>/ in each of `owner`'s run buckets in `project`; {prefix
    URL: the names removed, relative to it}. Nothing else in them is touched."""
    client = storage_client(credentials, project, storage_endpoint)
    head = storage.run_bucket_name(owner, "")
    prefix = f"{storage.RUN_PREFIX}/{relative.strip('/')}/"
    out: dict[str, list[str]] = {}
    for name in sorted(b.name for b in client.list_buckets(prefix=head) if b.name.startswith(head)):
        blobs = list(client.list_blobs(name, prefix=prefix))
        for blob in blobs:
            blob.delete()
        if blobs:
            out[f"gs://{name}/{prefix}"] = [b.name[len(prefix):] for b in blobs]
    return out
