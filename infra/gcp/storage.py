"""Cloud Storage for checkpoints: the per-owner run bucket, and the node service account that may touch
one run's prefix only.

A GCP node must keep its checkpoints off its boot disk (deleted with a spot VM). Unless the job names
its own `checkpoint: gs://...`, dlrun uses one bucket per owner and region, created on first use with
uniform bucket-level access, public access prevention, and a lifecycle rule deleting objects under
runs/ after RUN_EXPIRY_DAYS. Nodes get no keys: a service account, attached to the instances at
launch, whose only grants are two conditional bindings on that bucket's IAM policy (the objects under
the run's prefix; listing that prefix). The google libraries on the node fetch the account's
short-lived tokens from the metadata server by themselves.

Nothing here imports a Google SDK at module level: callers pass clients (the planner names the bucket
without any SDK).
"""
from __future__ import annotations

import hashlib
import json

from infra.buckets import run_bucket_name, split_url  # noqa: F401  (callers use storage.*)

RUN_PREFIX = "runs"   # every dlrun-made object lives under gs://RUN_BUCKET/runs/
RUN_EXPIRY_DAYS = 30  # the lifecycle rule on the run bucket
OBJECT_ROLE = "roles/storage.objectAdmin"    # read/write/delete objects (no bucket settings, no IAM)
LIST_ROLE = "roles/storage.objectViewer"     # held on the bucket resource only: objects.list
OBJECTS_TITLE, LIST_TITLE = "dlrun-run-objects", "dlrun-run-list"
POLICY_VERSION = 3  # conditional bindings need policy version 3 (JSON API buckets/getIamPolicy)
# what the node's token may be used for; the IAM bindings decide what it can reach (the run's prefix;
# its own instance and boot disk, for self-deletion: infra/gcp/self_end.py)
NODE_SCOPES = ("https://www.googleapis.com/auth/devstorage.read_write", "https://www.googleapis.com/auth/compute")
ACCOUNT_PREFIX = "dlrun-"
DESCRIPTION_MAX = 256  # IAM serviceAccounts.description


def run_bucket_url(owner: str, region: str) -> str:
    return f"gs://{run_bucket_name(owner, region)}/{RUN_PREFIX}"


def account_id(cluster_id: str) -> str:
    """One service account per cluster: made by its launch, removed with it (terminate, `down --orphans`),
    so a project holds only as many as clusters are up. IAM account ids are 6-30 of [a-z0-9-], starting
    with a letter."""
    return ACCOUNT_PREFIX + hashlib.sha256(cluster_id.encode()).hexdigest()[:24]


def account_description(*, cluster_id: str, job_id: str, region: str, bucket: str, owner: str) -> str:
    """What a leftover account is found and removed by (accounts have no labels): JSON, within IAM's 256
    characters (the owner is cut first)."""
    record = {"dlrun": "node", "cluster": cluster_id, "job": job_id, "region": region, "bucket": bucket}
    room = DESCRIPTION_MAX - len(json.dumps({**record, "owner": ""}, separators=(",", ":")))
    return json.dumps({**record, "owner": owner[:max(room, 0)]}, separators=(",", ":"))


def parse_description(text: str) -> dict | None:
    """account_description's record, or None for an account dlrun did not describe."""
    try:
        record = json.loads(text or "")
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("dlrun") != "node" or not record.get("cluster"):
        return None
    return record


def account_email(account: str, project: str) -> str:
    return f"{account}@{project}.iam.gserviceaccount.com"


def node_bindings(bucket: str, prefix: str, email: str) -> list[dict]:
    """The bucket-policy bindings of a run's node account: its objects, and listing its prefix.

    Object permissions are checked against projects/_/buckets/B/objects/NAME; objects.list against the
    bucket, with the listed prefix as the storage.googleapis.com/objectListPrefix API attribute
    (cloud.google.com/iam/docs/conditions-attribute-reference, "API attributes")."""
    member = f"serviceAccount:{email}"
    return [
        {"role": OBJECT_ROLE, "members": [member], "condition": {
            "title": OBJECTS_TITLE, "description": f"objects under gs://{bucket}/{prefix}",
            "expression": f'resource.name.startsWith("projects/_/buckets/{bucket}/objects/{prefix}")'}},
        {"role": LIST_ROLE, "members": [member], "condition": {
            "title": LIST_TITLE, "description": f"list gs://{bucket}/{prefix}",
            "expression": ('resource.type == "storage.googleapis.com/Bucket" && api.getAttribute('
                           f'"storage.googleapis.com/objectListPrefix", "").startsWith("{prefix}")')}},
    ]


def ensure_run_bucket(client, bucket: str, region: str, owner: str) -> bool:
    """Create the owner's run bucket with its expiry rule; True when it was created now.

    A name held by another project answers 403 to the lookup: google.api_core Forbidden propagates."""
    from google.api_core.exceptions import Conflict

    if client.lookup_bucket(bucket) is not None:
        return False
    b = client.bucket(bucket)
    b.iam_configuration.uniform_bucket_level_access_enabled = True
    b.iam_configuration.public_access_prevention = "enforced"
    b.labels = {"dlrun-owner": _label(owner)}
    b.add_lifecycle_delete_rule(age=RUN_EXPIRY_DAYS, matches_prefix=[f"{RUN_PREFIX}/"])
    try:
        client.create_bucket(b, location=region)
    except Conflict:  # made meanwhile by another launch of ours (else the lookup above said 403)
        if client.lookup_bucket(bucket) is None:
            raise
        return False
    return True


def ensure_node_account(iam, client, bucket: str, prefix: str, owner: str, *, cluster_id: str,
                        job_id: str = "", region: str = "") -> str:
    """The cluster's service account (email) whose only grants are node_bindings on `bucket`; made or
    reused (a relaunch of the same cluster).

    `iam` is infra/gcp/iam.py's IamApi, `client` a google.cloud.storage.Client."""
    account = account_id(cluster_id)
    email = iam.ensure_service_account(account, display_name=f"dlrun node {cluster_id}"[:100],
                                       description=account_description(cluster_id=cluster_id, job_id=job_id,
                                                                       region=region, bucket=bucket, owner=owner))
    b = client.bucket(bucket)
    policy = b.get_iam_policy(requested_policy_version=POLICY_VERSION)
    wanted = node_bindings(bucket, prefix, email)
    member = f"serviceAccount:{email}"
    # replace (not only add) this account's bindings: a policy left half-made by an interrupted launch
    kept = [x for x in policy.bindings if member not in x.get("members", ())]
    mine = [_plain(x) for x in policy.bindings if member in x.get("members", ())]
    if mine != wanted:
        policy.version = POLICY_VERSION
        policy.bindings = kept + wanted
        _set_policy(b, policy, email, iam.sleep)
    return email


def remove_node_account(iam, client, email: str) -> bool:
    """The account's bindings on its bucket first (a deleted account's bindings would stay in the policy
    as deleted:serviceAccount:...), then the account; True when it was there."""
    account = iam.get(email)
    if account is None:
        return False
    record = parse_description(account.get("description", "")) or {}
    if record.get("bucket") and client.lookup_bucket(record["bucket"]) is not None:
        b = client.bucket(record["bucket"])
        policy = b.get_iam_policy(requested_policy_version=POLICY_VERSION)
        member = f"serviceAccount:{email}"
        kept = [x for x in policy.bindings if member not in x.get("members", ())]
        if len(kept) != len(policy.bindings):
            policy.version = POLICY_VERSION
            policy.bindings = kept
            b.set_iam_policy(policy)
    return iam.delete(email)


def list_node_accounts(iam, limit: int) -> dict[str, dict]:
    """{email: its description record} of the project's accounts that dlrun made for a cluster (the
    id it gives that cluster's account, and its description); at most `limit` accounts are looked at."""
    found = {}
    for account in iam.list(limit=limit):
        record = parse_description(account.get("description", ""))
        email = account.get("email", "")
        if record and email.split("@", 1)[0] == account_id(record["cluster"]):
            found[email] = record
    return found


POLICY_TRIES, POLICY_RETRY_S = 30, 2.0


def _set_policy(bucket, policy, email: str, sleep) -> None:
    """setIamPolicy, retried while Cloud Storage does not know the just-made account yet (400 naming it:
    IAM is eventually consistent, cloud.google.com/iam/docs/overview#consistency)."""
    from google.api_core.exceptions import BadRequest

    for attempt in range(POLICY_TRIES):
        try:
            bucket.set_iam_policy(policy)
            return
        except BadRequest as e:
            if email not in str(e) or attempt == POLICY_TRIES - 1:
                raise
            sleep(POLICY_RETRY_S)


def _plain(binding: dict) -> dict:
    """A binding as node_bindings writes it (the client library hands members back as a set)."""
    return {**binding, "members": sorted(binding.get("members", ()))}


def _label(value: str) -> str:
    import re

    return re.sub(r"[^a-z0-9_-]", "-", value.lower())[:63]
