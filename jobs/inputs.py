"""A job's data inputs on the node: sync each source into a cache, set DLRUN_DATA_DIR, run the job.

    python -m jobs.inputs -- COMMAND ...

DLRUN_DATA_SOURCES (JSON list of {"name", "url", "kind"}) names the sources:
  kind "dir"      a directory on this machine: used in place (no copy);
  kind "prefix"   s3://bucket/prefix: every object under it, mirrored into the cache;
  kind "manifest" s3://bucket/.../manifests/<digest>.json: a directory dlrun uploaded content-addressed
                  (MANIFEST_BLOBS next to it hold one object per sha256).
A file already in the cache with the same ETag and size (prefix) or sha256 (manifest) is not fetched
again: the cache's own record, SYNC_RECORD, says what each local file was made from. The cache is
DLRUN_DATA_CACHE (default ~/.dlrun/data). Credentials: boto3's own chain (a node's instance role).

DLRUN_DATA_DIR is the one source's directory, or a directory holding one entry per source, named
after it. Stdlib + boto3 only (boto3 imported only when a source is in S3).
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

SOURCES_ENV = "DLRUN_DATA_SOURCES"
CACHE_ENV = "DLRUN_DATA_CACHE"
DATA_DIR_ENV = "DLRUN_DATA_DIR"
SYNC_RECORD = ".dlrun-sync.json"
MANIFEST_BLOBS = "blobs"  # sibling of the manifests/ prefix


def split_s3(url: str) -> tuple[str, str]:
    bucket, _, key = url.split("://", 1)[1].partition("/")
    return bucket, key


def _client():
    import boto3

    return boto3.client("s3")


def _record(dest: Path) -> dict:
    try:
        return json.loads((dest / SYNC_RECORD).read_text())
    except (OSError, ValueError):
        return {}


def _fetch(s3, bucket: str, key: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".dlrun-part")
    s3.download_file(bucket, key, str(tmp))
    os.replace(tmp, target)  # a half-downloaded file is never taken for a synced one


def _sync(dest: Path, wanted: dict[str, tuple[str, str]], fetch) -> int:
    """wanted: relative path -> (version tag, object key). Fetch what changed, drop what went; returns
    the number of files fetched."""
    dest.mkdir(parents=True, exist_ok=True)
    had = _record(dest)
    fetched = 0
    for rel, (tag, key) in wanted.items():
        target = dest / rel
        if had.get(rel) == tag and target.is_file():
            continue
        fetch(key, target)
        fetched += 1
    for rel in set(had) - set(wanted):
        (dest / rel).unlink(missing_ok=True)
    (dest / SYNC_RECORD).write_text(json.dumps({rel: tag for rel, (tag, _) in wanted.items()}, sort_keys=True))
    return fetched


def sync_prefix(s3, url: str, dest: Path) -> int:
    bucket, prefix = split_s3(url)
    prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
    wanted = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix):]
            if rel and not rel.endswith("/"):
                wanted[rel] = (f"{obj['ETag']}:{obj['Size']}", obj["Key"])
    return _sync(dest, wanted, lambda key, target: _fetch(s3, bucket, key, target))


def sync_manifest(s3, url: str, dest: Path) -> int:
    bucket, key = split_s3(url)
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    blobs = key.rsplit("/", 2)[0] + f"/{MANIFEST_BLOBS}/"
    wanted = {f["path"]: (f"sha256:{f['sha256']}:{f['size']}", blobs + f["sha256"]) for f in manifest["files"]}
    return _sync(dest, wanted, lambda k, target: _fetch(s3, bucket, k, target))


def prepare(sources: list[dict], cache: Path) -> tuple[str, int]:
    """Sync every source; (DLRUN_DATA_DIR, files fetched)."""
    s3 = _client() if any(s["kind"] != "dir" for s in sources) else None
    places, fetched = {}, 0
    for s in sources:
        if s["kind"] == "dir":
            places[s["name"]] = Path(s["url"])
            continue
        # one cache dir per source across its versions: a new manifest refetches only what changed
        where = s["url"].rsplit("/manifests/", 1)[0] if s["kind"] == "manifest" else s["url"]
        dest = cache / s["name"] / hashlib.sha256(where.encode()).hexdigest()[:12]
        fetched += (sync_manifest if s["kind"] == "manifest" else sync_prefix)(s3, s["url"], dest)
        places[s["name"]] = dest
    if len(places) == 1:
        return str(next(iter(places.values()))), fetched
    root = cache / "jobs" / hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()[:12]
    root.mkdir(parents=True, exist_ok=True)
    for name, place in places.items():
        link = root / name
        if link.is_symlink() and os.readlink(link) != str(place):
            link.unlink()
        if not link.is_symlink():
            link.symlink_to(place, target_is_directory=True)
    return str(root), fetched


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m jobs.inputs -- COMMAND ...", file=sys.stderr)
        return 2
    sources = json.loads(os.environ.get(SOURCES_ENV) or "[]")
    if sources:
        cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".dlrun" / "data").expanduser()
        data_dir, fetched = prepare(sources, cache)
        os.environ[DATA_DIR_ENV] = data_dir
        print(f"dlrun: data ready in {data_dir} ({fetched} file(s) fetched)", flush=True)
    os.execvp(command[0], command)  # the job becomes this process: signals reach it unchanged
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
