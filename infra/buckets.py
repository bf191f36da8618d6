"""dlrun's bucket names and bucket URLs, the same on every cloud (S3 and GCS names are global)."""
from __future__ import annotations

import hashlib


def run_bucket_name(owner: str, region: str) -> str:
    """dlrun's bucket for `owner` in `region` (S3 and GCS names are global, so the owner goes in as a hash)."""
    digest = hashlib.sha256(owner.encode()).hexdigest()[:12]
    return f"dlrun-{digest}-{region}"[:63]


def split_url(url: str) -> tuple[str, str]:
    """s3://bucket/a/b or gs://bucket/a/b -> ("bucket", "a/b/"); the prefix ends with '/' (or is empty)."""
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


NODE_CLIENTS = {"s3": "boto3", "gs": "google-cloud-storage"}  # what jobs.checkpoint imports per scheme


def node_client_packages(location: str) -> list[str]:
    """What a node needs for jobs.checkpoint to reach `location` (s3://…, gs://…, or just the scheme):
    the version installed here when there is one, so the node runs what was tested."""
    from importlib.metadata import PackageNotFoundError, version

    scheme = location.split("://", 1)[0].lower()
    name = NODE_CLIENTS.get(scheme)
    if name is None:
        return []
    try:
        return [f"{name}=={version(name)}"]
    except PackageNotFoundError:
        return [name]
