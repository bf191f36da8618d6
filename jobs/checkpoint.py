"""Training checkpoints in a local directory, s3://bucket/prefix or gs://bucket/prefix.

The contract any training script can use: dlrun sets the environment variable DLRUN_CHECKPOINT_DIR
to the job's checkpoint location (the spec's `checkpoint:`). A script saves a checkpoint every
epoch and, when restarted (after a preemption, a kill, a resubmit), resumes from the latest one:

    from jobs.checkpoint import open_checkpoints
    store = open_checkpoints()               # None when DLRUN_CHECKPOINT_DIR is unset
    state = store.load_latest() if store else None
    ...
    store.save({"epoch": epoch, "model": model.state_dict(), ...}, epoch)

Files are named epoch-000007.pt (7 epochs done), or epoch-000007-step-000012.pt (7 epochs and 12
steps of the 8th: written when a preemption notice stops the job mid-epoch); the newest two are
kept. Every write is atomic: a local file is written to a temporary name and renamed with
os.replace; an S3/GCS object appears whole or not at all (one PUT). The newest checkpoint that
reads back whole is what resumes. S3 honours AWS_ENDPOINT_URL (and AWS_ENDPOINT_URL_S3), so it also
works against moto or MinIO; GCS honours STORAGE_EMULATOR_HOST (and API_ENDPOINT_OVERRIDE, which keeps
the node's credentials).
"""
from __future__ import annotations

import io
import os
import re
import tempfile
from pathlib import Path

CHECKPOINT_ENV = "DLRUN_CHECKPOINT_DIR"
KEEP_LAST = 2
_NAME = re.compile(r"^epoch-(\d{6,})(?:-step-(\d{6,}))?\.pt$")


class CheckpointError(Exception):
    """The checkpoint location is unusable: the message says what to fix."""


def checkpoint_name(epoch: int, step: int = 0) -> str:
    return f"epoch-{epoch:06d}-step-{step:06d}.pt" if step else f"epoch-{epoch:06d}.pt"


def point_of(name: str) -> tuple[int, int] | None:
    """(epoch, step) of a checkpoint's file name; None for any other name."""
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def _to_bytes(state: dict) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def _from_bytes(data: bytes) -> dict:
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


class Checkpoints:
    """A checkpoint location; subclasses store named blobs (put/get/names/delete)."""

    location: str

    def save(self, state: dict, epoch: int, step: int = 0) -> str:
        """Write state as the checkpoint of `epoch` epochs and `step` more steps (atomic), then
        prune all but the newest."""
        name = checkpoint_name(epoch, step)
        self._put(name, _to_bytes(state))
        for old in self.points()[:-KEEP_LAST]:
            self._delete(checkpoint_name(*old))
        return f"{self.location.rstrip('/')}/{name}"

    def points(self) -> list[tuple[int, int]]:
        """(epoch, step) of every checkpoint, oldest first."""
        return sorted(p for n in self._names() if (p := point_of(n)))

    def epochs(self) -> list[int]:
        """Epochs that have a checkpoint, oldest first."""
        return sorted({epoch for epoch, _ in self.points()})

    def clear(self) -> list[int]:
        """Remove every checkpoint, mid-epoch ones too (a run started over); the epochs removed, oldest first."""
        points = self.points()
        for point in points:
            self._delete(checkpoint_name(*point))
        return sorted({epoch for epoch, _ in points})

    def load_latest(self) -> dict | None:
        """The newest checkpoint that reads back whole (a damaged one is skipped, not fatal)."""
        points = self.points()
        for point in reversed(points):
            try:
                return _from_bytes(self._get(checkpoint_name(*point)))
            except CheckpointError:
                raise
            except Exception as e:  # truncated by a full disk, written by an incompatible torch, ...
                print(f"dlrun: checkpoint {checkpoint_name(*point)} at {self.location} is unreadable "
                      f"({type(e).__name__}); trying the one before", flush=True)
        return None

    def _put(self, name: str, data: bytes) -> None:
        raise NotImplementedError

    def _get(self, name: str) -> bytes:
        raise NotImplementedError

    def _names(self) -> list[str]:
        raise NotImplementedError

    def _delete(self, name: str) -> None:
        raise NotImplementedError


class LocalCheckpoints(Checkpoints):
    def __init__(self, directory: str):
        self.path = Path(directory).expanduser()
        self.location = str(self.path)

    def _put(self, name: str, data: bytes) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CheckpointError(f"cannot create checkpoint directory {self.path}: {e.strerror}") from e
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _get(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def _names(self) -> list[str]:
        return [p.name for p in self.path.iterdir()] if self.path.is_dir() else []

    def _delete(self, name: str) -> None:
        (self.path / name).unlink(missing_ok=True)


def _split_bucket_url(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    if not bucket:
        raise CheckpointError(f"checkpoint location {url!r} names no bucket: use "
                              f"{url.split('://')[0]}://BUCKET/PREFIX")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


class S3Checkpoints(Checkpoints):
    def __init__(self, url: str):
        import boto3

        self.location = url
        self.bucket, self.prefix = _split_bucket_url(url)
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        self.client = boto3.client("s3", endpoint_url=endpoint or None)

    def _call(self, what: str, fn, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kwargs)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket", "404") and what != "read":
                raise CheckpointError(f"S3 bucket {self.bucket!r} does not exist: create it or "
                                      f"fix the checkpoint location {self.location}") from None
            raise CheckpointError(f"S3 {what} at {self.location} failed ({code}): "
                                  f"{e.response.get('Error', {}).get('Message', e)}") from None
        except BotoCoreError as e:  # no credentials, endpoint unreachable, ...
            raise CheckpointError(f"S3 {what} at {self.location} failed: {e}") from None

    def _put(self, name: str, data: bytes) -> None:
        self._call("write", self.client.put_object, Key=self.prefix + name, Body=data)

    def _get(self, name: str) -> bytes:
        return self._call("read", self.client.get_object, Key=self.prefix + name)["Body"].read()

    def _names(self) -> list[str]:
        names, token = [], None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            page = self._call("list", self.client.list_objects_v2, Prefix=self.prefix, **extra)
            names += [o["Key"][len(self.prefix):] for o in page.get("Contents", [])]
            if not page.get("IsTruncated"):
                return names
            token = page["NextContinuationToken"]

    def _delete(self, name: str) -> None:
        self._call("delete", self.client.delete_object, Key=self.prefix + name)


class GcsCheckpoints(Checkpoints):
    """On a GCP node the client's credentials are the attached service account's (metadata server)."""

    def __init__(self, url: str):
        try:
            from google.cloud import storage
        except ImportError:
            raise CheckpointError("gs:// checkpoints need the google-cloud-storage package: "
                                  "pip install google-cloud-storage") from None
        self.location = url
        self.bucket_name, self.prefix = _split_bucket_url(url)
        try:
            self.bucket = storage.Client().bucket(self.bucket_name)
        except Exception as e:  # no application default credentials or project
            raise CheckpointError(f"cannot open {url}: {e}") from None

    def _call(self, what: str, fn, *args, **kwargs):
        from google.api_core.exceptions import GoogleAPICallError, NotFound
        from google.auth.exceptions import GoogleAuthError

        try:
            return fn(*args, **kwargs)
        except NotFound as e:
            if what != "read" and "bucket" in str(e).lower():
                raise CheckpointError(f"GCS bucket {self.bucket_name!r} does not exist: create it or "
                                      f"fix the checkpoint location {self.location}") from None
            raise
        except GoogleAPICallError as e:
            raise CheckpointError(f"GCS {what} at {self.location} failed ({e.code}): {e.message}") from None
        except GoogleAuthError as e:
            raise CheckpointError(f"GCS {what} at {self.location} failed: {e}") from None

    def _put(self, name: str, data: bytes) -> None:
        self._call("write", self.bucket.blob(self.prefix + name).upload_from_string, data)

    def _get(self, name: str) -> bytes:
        return self._call("read", self.bucket.blob(self.prefix + name).download_as_bytes)

    def _names(self) -> list[str]:
        return self._call("list", lambda: [b.name[len(self.prefix):]
                                           for b in self.bucket.list_blobs(prefix=self.prefix)])

    def _delete(self, name: str) -> None:
        self._call("delete", self.bucket.blob(self.prefix + name).delete)


def open_checkpoints(location: str | None = None) -> Checkpoints | None:
    """The store at `location` (default: $DLRUN_CHECKPOINT_DIR); None when neither is set."""
    location = location if location is not None else os.environ.get(CHECKPOINT_ENV, "")
    location = location.strip()
    if not location:
        return None
    scheme = location.split("://", 1)[0].lower() if "://" in location else ""
    if scheme == "s3":
        return S3Checkpoints(location)
    if scheme == "gs":
        return GcsCheckpoints(location)
    if scheme in ("", "file"):
        return LocalCheckpoints(location.split("://", 1)[-1])
    raise CheckpointError(f"unsupported checkpoint location {location!r}: use a directory, "
                          "s3://BUCKET/PREFIX or gs://BUCKET/PREFIX")
