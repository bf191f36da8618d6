"""What a launch needs for checkpoints in S3: the bucket (dlrun's own is created on first use), the
node role scoped to the run's prefix, boto3 on the node, and patience while IAM propagates; and the job's
local data directories, uploaded once and content-addressed (upload_dir).

Data under the data prefix: `blobs/<sha256>` holds one object per distinct file content, and
`manifests/<digest>.json` lists relative path + size + sha256 of every file of one version of the
directory (digest: sha256 of that list). The manifest is written last, so its presence means every
blob it names is there: resubmitting the same directory costs one HEAD and uploads nothing; a
changed directory uploads only the files whose content is new. Nothing under data/ expires (the run
bucket's lifecycle rule covers runs/ only): a blob may serve many runs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from botocore.exceptions import ClientError

from infra.aws import storage
from infra.aws.errors import error_code
from infra.base import ProvisionError

# DeleteObjects takes at most 1000 keys (docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html)
DELETE_BATCH = 1000


def prepare_storage(session, url: str, *, region: str, owner: str, endpoint_url: str | None,
                    cluster_id: str, job_id: str = "", data_read: tuple = (), data_uploads: tuple = ()) -> str:
    """The instance profile for a run stored at `url` (s3:// only); makes dlrun's run bucket if it is the
    one, uploads the job's local data directories (once) and lets the role read its data inputs."""
    if not url.startswith("s3://"):
        raise ProvisionError(f"checkpoint {url} is not in S3: AWS nodes get credentials for S3 only; "
                             "use s3://BUCKET/PREFIX", cloud="aws", region=region)
    bucket, prefix = storage.split_url(url)
    try:
        if bucket == storage.run_bucket_name(owner, region):
            s3 = session.client("s3", region_name=region, endpoint_url=endpoint_url)
            storage.ensure_run_bucket(s3, bucket, region, owner)
        if data_uploads:
            s3 = session.client("s3", region_name=region, endpoint_url=endpoint_url)
            for root, manifest_url, manifest in data_uploads:
                upload_dir(s3, root, manifest, manifest_url)
        iam = session.client("iam", endpoint_url=endpoint_url)
        return storage.ensure_node_profile(iam, bucket, prefix, owner, tuple(data_read), cluster_id=cluster_id,
                                           job_id=job_id, region=region)
    except ClientError as e:
        if error_code(e) == "BucketAlreadyExists":
            raise ProvisionError(f"the S3 bucket name {bucket} belongs to another account: set "
                                 "checkpoint: s3://YOUR-BUCKET/PREFIX in the job file", cloud="aws",
                                 region=region) from None
        raise


def _profile_not_visible_yet(e: ClientError) -> bool:
    # IAM is eventually consistent: a new instance profile can be refused by EC2 for seconds
    # (https://docs.aws.amazon.com/IAM/latest/UserGuide/troubleshoot_general.html#troubleshoot_general_eventual-consistency,
    # hashicorp/packer#9810 retries on exactly this message)
    msg = e.response.get("Error", {}).get("Message", "")
    return error_code(e) == "InvalidParameterValue" and "iamInstanceProfile" in msg


def run_instances(ec2, params: dict, poll) -> dict:
    """ec2.run_instances, retried while a just-made instance profile is not visible to EC2 yet."""
    if "IamInstanceProfile" not in params:
        return ec2.run_instances(**params)

    def attempt():
        try:
            return ec2.run_instances(**params)
        except ClientError as e:
            if _profile_not_visible_yet(e):
                return None
            raise
    return poll(attempt, f"instance profile {params['IamInstanceProfile']['Name']} not visible to EC2 yet")


def remove_node_role(session, name: str, endpoint_url: str | None) -> bool:
    """The cluster's node role and instance profile, once its instances are gone."""
    return storage.remove_node_profile(session.client("iam", endpoint_url=endpoint_url), name)


def leftover_node_roles(session, endpoint_url: str | None) -> dict[str, dict[str, str]]:
    """dlrun's node roles and their tags; {} (with a warning) when this login may not list roles: it then
    made none either, and the rest of `down --orphans` must still run."""
    import logging

    try:
        return storage.list_node_roles(session.client("iam", endpoint_url=endpoint_url))
    except ClientError as e:
        if error_code(e) not in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            raise
        logging.getLogger(__name__).warning("node roles not searched: %s", e)
        return {}


def clear_run_prefix(session, owner: str, relative: str, endpoint_url: str | None) -> dict[str, list[str]]:
    """`--fresh`: every object under runs/<relative>/ in each of `owner`'s run buckets (one per region the
    run may have used); {prefix URL: the names removed, relative to it}. Nothing else in them is touched."""
    head = storage.run_bucket_name(owner, "")  # dlrun-<owner hash>-: then the bucket's region
    prefix = f"{storage.RUN_PREFIX}/{relative.strip('/')}/"
    found = session.client("s3", endpoint_url=endpoint_url).list_buckets(Prefix=head)["Buckets"]
    out: dict[str, list[str]] = {}
    for bucket in sorted(b["Name"] for b in found if b["Name"].startswith(head)):
        s3 = session.client("s3", region_name=bucket[len(head):], endpoint_url=endpoint_url)
        keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                for o in page.get("Contents", [])]
        for i in range(0, len(keys), DELETE_BATCH):
            batch = [{"Key": k} for k in keys[i:i + DELETE_BATCH]]
            s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        if keys:
            out[f"s3://{bucket}/{prefix}"] = [k[len(prefix):] for k in keys]
    return out


def _exists(s3, bucket: str, key: str) -> bool:
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise


def upload_dir(s3, root: str, manifest: dict, manifest_url: str) -> int:
    """Upload `root` as `manifest` describes it, to the manifest's place; returns files uploaded."""
    bucket, key = manifest_url.split("://", 1)[1].split("/", 1)
    if _exists(s3, bucket, key):
        return 0
    blobs = key.rsplit("/", 2)[0] + "/blobs/"
    uploaded, seen = 0, set()
    for f in manifest["files"]:
        if f["sha256"] in seen or _exists(s3, bucket, blobs + f["sha256"]):
            seen.add(f["sha256"])
            continue
        s3.upload_file(os.path.join(root, *Path(f["path"]).parts), bucket, blobs + f["sha256"])
        seen.add(f["sha256"])
        uploaded += 1
    s3.put_object(Bucket=bucket, Key=key, Body=json.dumps(manifest, sort_keys=True).encode(),
                  ContentType="application/json")
    return uploaded
