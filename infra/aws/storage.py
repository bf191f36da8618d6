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

from infra.buckets import run_bucket_name, split_url  # noqa: F401  (callers use storage.*)

RUN_PREFIX = "runs"          # every dlrun-made object lives under s3://RUN_BUCKET/runs/
RUN_EXPIRY_DAYS = 30          # the lifecycle rule on the run bucket
ROLE_PATH = "/dlrun/"
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


def role_name(bucket: str, prefix: str) -> str:
    """One role per run prefix (reused by every attempt and resubmission of that run)."""
    return "dlrun-node-" + hashlib.sha256(f"{bucket}/{prefix}".encode()).hexdigest()[:20]


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


def ensure_node_profile(iam, bucket: str, prefix: str, owner: str, read: tuple[str, ...] = ()) -> str:
    """The instance profile (same name as its role) whose role may touch bucket/prefix only."""
    from botocore.exceptions import ClientError

    name = role_name(bucket, prefix)
    tags = [{"Key": "dlrun-owner", "Value": owner[:256]}, {"Key": "dlrun-storage", "Value": f"s3://{bucket}/{prefix}"[:256]}]
    try:
        iam.create_role(RoleName=name, Path=ROLE_PATH, AssumeRolePolicyDocument=json.dumps(EC2_TRUST),
                        Description="dlrun node: checkpoints of one run", Tags=tags)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "EntityAlreadyExists":
            raise
    # put (not only on creation): a role left half-made by an interrupted launch gets its policy
    iam.put_role_policy(RoleName=name, PolicyName="dlrun-run-storage", PolicyDocument=json.dumps(node_policy(bucket, prefix, read)))
    try:
        iam.create_instance_profile(InstanceProfileName=name, Path=ROLE_PATH, Tags=tags)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "EntityAlreadyExists":
            raise
    roles = iam.get_instance_profile(InstanceProfileName=name)["InstanceProfile"].get("Roles", [])
    if not any(r["RoleName"] == name for r in roles):
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=name)
    return name
