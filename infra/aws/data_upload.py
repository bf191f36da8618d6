"""A job's local data directory in S3, uploaded once and content-addressed.

Under the data prefix: `blobs/<sha256>` holds one object per distinct file content, and
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
