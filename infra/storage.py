"""Which bucket a cloud's nodes can keep checkpoints in, without importing any cloud SDK.

NODE_SCHEMES: the bucket scheme a backend's nodes get scoped credentials for (infra/<cloud>/storage.py);
a backend absent here gives its nodes no storage credentials yet.
"""
from __future__ import annotations

NODE_SCHEMES = {"aws": "s3", "gcp": "gs"}
# Clouds whose single on-demand attempts keep checkpoints on the node's disk (no bucket, no node identity)
# unless the job names a bucket. GCP: each bucket run needs its own service account, and a project holds
# 100 by default (cloud.google.com/iam/quotas), so only runs that need a second attempt get one.
BUCKET_WHEN_NEEDED = {"gcp"}


def node_scheme(cloud: str) -> str | None:
    return NODE_SCHEMES.get(cloud)


def bucket_for_every_run(cloud: str) -> bool:
    """False: only runs that may need a second attempt (spot, restarts) use dlrun's bucket on `cloud`."""
    return cloud not in BUCKET_WHEN_NEEDED


def run_bucket_url(cloud: str, region: str, owner: str) -> str | None:
    """dlrun's own checkpoint bucket (as s3://.../runs or gs://.../runs) for this owner and region, or None."""
    if cloud == "aws":
        from infra.aws.storage import run_bucket_url as aws_url

        return aws_url(owner, region)
    if cloud == "gcp":
        from infra.gcp.storage import run_bucket_url as gcp_url

        return gcp_url(owner, region)
    return None


def expiry_days(cloud: str) -> int | None:
    if cloud == "aws":
        from infra.aws.storage import RUN_EXPIRY_DAYS

        return RUN_EXPIRY_DAYS
    if cloud == "gcp":
        from infra.gcp.storage import RUN_EXPIRY_DAYS as gcp_days

        return gcp_days
    return None
