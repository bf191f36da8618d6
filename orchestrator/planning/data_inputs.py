"""A job's `data:` sources: checked at load, measured for the plan, and described for the node.

A source is s3://bucket/prefix, gs://bucket/prefix, or a directory on this machine (relative to the
job file). On this machine a directory is used in place; for a cloud node dlrun uploads it once,
content-addressed (manifest of relative path + size + sha256), to the data prefix of the bucket the
run's checkpoints go to, and the node syncs it down (jobs/inputs.py). The plan adds the transfer
time, bytes / TRANSFER_BYTES_PER_S of the cloud, to a candidate's start-up.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from orchestrator.errors import SpecError

SCHEMES = ("s3", "gs")
# One connection from EC2 to S3 in the same region: AWS sizes S3 parallelism as "one concurrent request
# for each 85-90 MB/s of desired network throughput" (Performance guidelines for Amazon S3, "Horizontal
# scaling of storage connections", https://docs.aws.amazon.com/AmazonS3/latest/userguide/optimizing-performance-guidelines.html);
# jobs/inputs.py fetches one file at a time. GCS to GCE: the same figure assumed (no GCS node sync yet).
# Local: a directory is used in place and moves nothing.
UPLOADS_TO = ("s3",)  # where a local data directory can be uploaded (infra/aws/launch_storage.py, upload_dir)
TRANSFER_BYTES_PER_S = {"local": 0.0, "aws": 90e6, "gcp": 90e6}
_CHUNK = 1 << 20


def scheme(source: str) -> str:
    return source.split("://", 1)[0].lower() if "://" in source else ""


def source_name(source: str) -> str:
    """The name of a source's entry under DLRUN_DATA_DIR: its last path part."""
    tail = source.split("://", 1)[-1].rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tail) or "data"


def check_data(sources: list[str], where: str) -> list[str]:
    """The sources with local directories made absolute (relative to the job file); exit 2 on a bad one."""
    out, names = [], set()
    for i, src in enumerate(sources):
        s = scheme(src)
        if s and s not in SCHEMES:
            raise SpecError(f"{where}: field 'data.{i}': {src}: only s3://, gs:// or a local directory; fix the source")
        if s and not src.split("://", 1)[1].split("/", 1)[0]:
            raise SpecError(f"{where}: field 'data.{i}': {src} names no bucket; write {s}://BUCKET/PREFIX")
        if not s:
            p = Path(src).expanduser()
            p = p if p.is_absolute() else (Path(where).parent / p)
            if not p.is_dir():
                what = "is not a directory" if p.exists() else "does not exist"
                raise SpecError(f"{where}: field 'data.{i}': {p} {what}; give an existing directory "
                                "(relative to the job file), s3://BUCKET/PREFIX or gs://BUCKET/PREFIX")
            src = str(p.resolve())
        name = source_name(src)
        if name in names:
            raise SpecError(f"{where}: field 'data.{i}': two sources are both named '{name}' under "
                            "DLRUN_DATA_DIR; rename one directory or prefix")
        names.add(name)
        out.append(src)
    return out


def _files(root: Path):
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames.sort()
        for f in sorted(filenames):
            full = Path(dirpath) / f
            yield full.relative_to(root).as_posix(), full


_manifests: dict[tuple, dict] = {}  # by the files' paths, sizes and mtimes: hash each file once per process


def manifest(root: str) -> dict:
    """{"files": [{"path", "size", "sha256"}]} of a local directory, in a stable order."""
    entries = [(rel, full, full.stat()) for rel, full in _files(Path(root))]
    key = (root, tuple((rel, st.st_size, st.st_mtime_ns) for rel, _, st in entries))
    if key not in _manifests:
        files = []
        for rel, full, st in entries:
            h = hashlib.sha256()
            with open(full, "rb") as f:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    h.update(chunk)
            files.append({"path": rel, "size": st.st_size, "sha256": h.hexdigest()})
        _manifests[key] = {"files": files}
    return _manifests[key]


def manifest_digest(m: dict) -> str:
    return hashlib.sha256(json.dumps(m, sort_keys=True).encode()).hexdigest()


def data_identity(sources: list[str]) -> list[str]:
    """What makes two runs' data the same: a bucket source's prefix, a local directory's content digest
    (the manifest an upload writes: paths, sizes, sha256; not where the directory is, nor its mtimes)."""
    return [src.rstrip("/") if scheme(src) else f"sha256:{manifest_digest(manifest(src))}" for src in sources]


def local_bytes(sources: list[str]) -> int:
    """Bytes of the local directories (what a cloud node downloads; bucket sources are not counted:
    sizing them would need the cloud's API at plan time)."""
    return sum(f.stat().st_size for s in sources if not scheme(s) for _, f in _files(Path(s)))


def transfer_seconds(cloud: str, nbytes: int) -> float:
    from infra import runs_here

    if runs_here(cloud):
        return 0.0
    rate = TRANSFER_BYTES_PER_S.get(cloud, TRANSFER_BYTES_PER_S["aws"])
    return nbytes / rate if rate else 0.0


def data_url(checkpoint: str) -> str:
    """The data prefix in the bucket that holds a run's checkpoints: s3://BUCKET/data."""
    bucket = checkpoint.split("://", 1)[1].split("/", 1)[0]
    return f"{scheme(checkpoint)}://{bucket}/data"


def node_sources(sources: list[str], *, local: bool, checkpoint: str = "") -> tuple[list[dict], list[tuple]]:
    """(what jobs/inputs.py syncs, [(local dir, manifest URL, manifest)] to upload first). On a cloud, a
    local directory goes through the data prefix of the checkpoint bucket."""
    out, uploads = [], []
    for src in sources:
        if scheme(src):
            out.append({"name": source_name(src), "url": src, "kind": "prefix"})
        elif local:
            out.append({"name": source_name(src), "url": src, "kind": "dir"})
        else:
            m = manifest(src)
            url = f"{data_url(checkpoint)}/manifests/{manifest_digest(m)}.json"
            out.append({"name": source_name(src), "url": url, "kind": "manifest"})
            uploads.append((src, url, m))
    return out, uploads


def read_urls(sources: list[dict], checkpoint: str) -> tuple[str, ...]:
    """What a node must be allowed to read: the bucket sources, and the data prefix when dlrun uploaded."""
    urls = [s["url"] for s in sources if s["kind"] == "prefix"]
    if any(s["kind"] == "manifest" for s in sources):
        urls.append(data_url(checkpoint))
    return tuple(urls)


def data_exclusion(spec, offer, checkpoint_base: str | None) -> str | None:
    """Why `offer` cannot get the job's data onto its nodes, or None."""
    from infra import runs_here
    from infra.storage import node_scheme

    for src in spec.data:
        s = scheme(src)
        if s == "gs":
            return f"data {src}: gs:// inputs are not synced onto nodes yet; copy them to s3:// or a local directory"
        if runs_here(offer.cloud):
            continue
        if s and s != node_scheme(offer.cloud):
            return f"data {src} is out of reach of {offer.cloud} nodes (no {s}:// credentials there)"
        if not s and scheme(checkpoint_base or "") not in UPLOADS_TO:  # no base: nowhere to upload to
            return (f"data {src} is a local directory and dlrun uploads data only to "
                    f"{', '.join(f'{u}://' for u in UPLOADS_TO)} buckets, not to {offer.cloud}'s yet")
    return None
