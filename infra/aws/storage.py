"""S3 for checkpoints: the per-owner run bucket, and the node role that may touch one run's prefix only.

A cloud node must keep its checkpoints off its boot disk (deleted with a spot VM). Unless the job
names its own `checkpoint: s3://...`, dlrun uses one bucket per owner and region, created on first
use with a lifecycle rule that expires runs after RUN_EXPIRY_DAYS. Nodes get no keys: an IAM role
whose only policy allows object read/write/delete under the run's prefix (and listing that prefix),
reached through an instance profile attached at launch; boto3 on the node finds the role's
temporary credentials in the instance metadata service by itself.

Nothing here imports boto3: callers pass clients (the planner names the bucket without any SDK).
"""
from __future__ import annotations

import hashlib
import json

from infra.base import TAG_CLUSTER, TAG_JOB, TAG_OWNER
from infra.buckets import run_bucket_name, split_url  # noqa: F401  (callers use storage.*)

TAG_REGION = "dlrun-region"  # on a node role: where its cluster's instances would be

RUN_PREFIX = "runs"          # every dlrun-made object lives under s3://RUN_BUCKET/runs/
RUN_EXPIRY_DAYS = 30          # the lifecycle rule on the run bucket
ROLE_PATH = "/dlrun/"
ROLE_PREFIX = "dlrun-node-"
MAX_LISTED_ROLES = 1000  # IAM's default role quota per account: the orphan search stops there
EC2_TRUST = {"Version": "2012-10-17", "Statement": [{
    "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}]}


def run_bucket_url(owner: str, region: str) -> str:
    return f"s3://{run_bucket_name(owner, region)}/{RUN_PREFIX}"


def node_policy(bucket: str, prefix: str, read: tuple[str, ...] = ()) -> dict:
    """Objects under bucket/prefix, and listing that prefix; reading (and listing) the `read` URLs (the
    job's data inputs): nothing else in S3 or anywhere."""
    reads = []
    for i, url in enumerate(read):
        b, p = split_url(url)
        reads += [{"Sid": f"ReadData{i}", "Effect": "Allow", "Action": "s3:GetObject",
                   "Resource": f"arn:aws:s3:::{b}/{p}*"},
                  {"Sid": f"ListData{i}", "Effect": "Allow", "Action": "s3:ListBucket",
                   "Resource": f"arn:aws:s3:::{b}", "Condition": {"StringLike": {"s3:prefix": [f"{p}*"]}}}]
    return {"Version": "2012-10-17", "Statement": [*reads,
        {"Sid": "RunObjects", "Effect": "Allow",
         "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
         "Resource": f"arn:aws:s3:::{bucket}/{prefix}*"},
        {"Sid": "ListRunPrefix", "Effect": "Allow", "Action": "s3:ListBucket",
         "Resource": f"arn:aws:s3:::{bucket}", "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}}},
    ]}


def role_name(cluster_id: str) -> str:
    """One role per cluster: made by its launch, removed with it (terminate, or `down --orphans`)."""
    return ROLE_PREFIX + hashlib.sha256(cluster_id.encode()).hexdigest()[:20]


def ensure_run_bucket(s3, bucket: str, region: str, owner: str) -> bool:
    """Create the owner's run bucket with its expiry rule; True when it was created now."""
    from botocore.exceptions import ClientError

    extra = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    # asked first: in us-east-1 CreateBucket on a bucket one already owns answers 200, not an error
    # (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateBucket.html, BucketAlreadyOwnedByYou)
    try:
        s3.head_bucket(Bucket=bucket)
        return False
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            if e.response.get("Error", {}).get("Code") == "403":
                raise ClientError({"Error": {"Code": "BucketAlreadyExists", "Message": bucket}}, "HeadBucket") from None
            raise
    try:
        s3.create_bucket(Bucket=bucket, **extra)
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code == "BucketAlreadyOwnedByYou":
            return False
        raise
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": True, "BlockPublicPolicy": True,
        "RestrictPublicBuckets": True})
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "dlrun-owner", "Value": owner[:256]}]})
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [{
        "ID": "dlrun-expire-old-runs", "Status": "Enabled", "Filter": {"Prefix": f"{RUN_PREFIX}/"},
        "Expiration": {"Days": RUN_EXPIRY_DAYS},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]})
    return True


def ensure_node_profile(iam, bucket: str, prefix: str, owner: str, read: tuple[str, ...] = (), *,
                        cluster_id: str, job_id: str = "", region: str = "") -> str:
    """The instance profile (same name as its role) whose role may touch bucket/prefix only; tagged with
    its cluster, so that a launch that died before its instances existed is still found (list_node_roles)."""
    from botocore.exceptions import ClientError

    name = role_name(cluster_id)
    tags = [{"Key": k, "Value": v[:256]} for k, v in (
        (TAG_OWNER, owner), ("dlrun-storage", f"s3://{bucket}/{prefix}"), (TAG_CLUSTER, cluster_id),
        (TAG_JOB, job_id), (TAG_REGION, region))]
    try:
        iam.create_role(RoleName=name, Path=ROLE_PATH, AssumeRolePolicyDocument=json.dumps(EC2_TRUST),
                        Description="dlrun node: checkpoints of one run", Tags=tags)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "EntityAlreadyExists":
            raise
    # put (not only on creation): a role left half-made by an interrupted launch gets its policy
    iam.put_role_policy(RoleName=name, PolicyName="dlrun-run-storage",
                        PolicyDocument=json.dumps(node_policy(bucket, prefix, read)))
    try:
        iam.create_instance_profile(InstanceProfileName=name, Path=ROLE_PATH, Tags=tags)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "EntityAlreadyExists":
            raise
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Roles", [])
    if not any(r["RoleName"] == name for r in roles):
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return name


def remove_node_profile(iam, name: str) -> bool:
    """Delete a node instance profile and its role (profile first: the role is what lists them); True
    when something was there. Missing pieces (a launch interrupted halfway, a second call) are skipped."""
    from botocore.exceptions import ClientError

    def unless_gone(remove) -> bool:
        try:
            remove()
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "NoSuchEntity":
                raise
            return False

    def profile() -> None:
        for role in iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Roles", []):
            iam.remove_role_from_instance_profile(InstanceProfileName=name, RoleName=role["RoleName"])
        iam.delete_instance_profile(InstanceProfileName=name)

    def role() -> None:
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]:
            iam.delete_role_policy(RoleName=name, PolicyName=policy)
        for policy in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
            iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
        iam.delete_role(RoleName=name)

    removed_profile = unless_gone(profile)  # both are tried: either may be missing alone
    return unless_gone(role) or removed_profile


def list_node_roles(iam, limit: int = MAX_LISTED_ROLES) -> dict[str, dict[str, str]]:
    """{role name: its tags} of dlrun's node roles (path ROLE_PATH, name ROLE_PREFIX...) that name their
    cluster; at most `limit` roles are looked at. ListRoles returns no tags, hence one ListRoleTags each."""
    found: dict[str, dict[str, str]] = {}
    seen = 0
    for page in iam.get_paginator("list_roles").paginate(PathPrefix=ROLE_PATH):
        for role in page["Roles"]:
            seen += 1
            if seen > limit:
                return found
            if not role["RoleName"].startswith(ROLE_PREFIX):
                continue
            tags = {t["Key"]: t["Value"] for t in iam.list_role_tags(RoleName=role["RoleName"])["Tags"]}
            if tags.get(TAG_CLUSTER):
                found[role["RoleName"]] = tags
    return found
