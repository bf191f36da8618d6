"""A job's workdir: checked when the job file is loaded, and its content digest (part of the run key).

What Ray would ship is what counts: the names in EXCLUDES (the runtime_env's excludes) are skipped
both in the size check and in the digest, so a new .git object or __pycache__ file changes neither.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from orchestrator.errors import SpecError
from orchestrator.settings import env_int

# Ray 2.60 refuses a working_dir package of GCS_STORAGE_MAX_SIZE bytes or more: RAY_max_grpc_message_size,
# default GRPC_CPP_MAX_MESSAGE_SIZE = 512 MiB (ray/_private/ray_constants.py,
# ray/_private/runtime_env/packaging.py: "Package size ... exceeds the maximum size"). Older Rays: 100 MiB.
RAY_GRPC_SIZE_ENV = "RAY_max_grpc_message_size"  # its default, 512 MiB: its row in orchestrator/settings.py
EXCLUDES = (".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".hypothesis")
EXCLUDED_SUFFIXES = (".pyc",)
_CHUNK = 1 << 20


def upload_limit_bytes() -> int:
    """Ray's largest working_dir package; a value that is no whole number is the user's mistake (UsageError)."""
    return env_int(RAY_GRPC_SIZE_ENV)


def _files(root: Path):
    """(relative path, absolute path) of every file Ray would ship, in a stable order; OSError when a
    directory cannot be listed."""
    def fail(e: OSError):
        raise e

    seen: set[tuple[int, int]] = set()  # links are followed (as Ray does): a cycle is walked once
    for dirpath, dirnames, filenames in os.walk(root, onerror=fail, followlinks=True):
        st = os.stat(dirpath)
        if (st.st_dev, st.st_ino) in seen:
            dirnames[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDES)
        for f in sorted(filenames):
            if f in EXCLUDES or f.endswith(EXCLUDED_SUFFIXES):
                continue
            full = os.path.join(dirpath, f)
            yield os.path.relpath(full, root), full


def check_workdir(path: str, where: str) -> None:
    """A SpecError (exit 2, one line) when the workdir is missing, unreadable or too big for Ray."""
    root = Path(path)
    if not root.exists():
        raise SpecError(f"{where}: field 'workdir': {path} does not exist; fix the path (relative to the job file)")
    if not root.is_dir():
        raise SpecError(f"{where}: field 'workdir': {path} is not a directory; give the directory to ship")
    limit, total = upload_limit_bytes(), 0
    try:
        for _rel, full in _files(root):
            total += os.stat(full).st_size
            if not os.access(full, os.R_OK):
                raise PermissionError(13, "Permission denied", full)
    except OSError as e:
        raise SpecError(f"{where}: field 'workdir': cannot read {e.filename or path} ({e.strerror}); "
                        "fix its permissions or exclude it") from None
    if total >= limit:
        raise SpecError(f"{where}: field 'workdir': {path} holds {total / 2**20:.0f} MiB, over Ray's upload limit "
                        f"of {limit / 2**20:.0f} MiB; move data out of it (read it from a bucket or a path)")


_digests: dict[str, str] = {}  # by the files' paths, sizes and mtimes: read the content once per process


def workdir_digest(path: str | None) -> str | None:
    """sha256 over every shipped file's path and content (None without a workdir). The size was bounded
    at load (check_workdir), so this reads at most Ray's upload limit, once per process."""
    if not path:
        return None
    stats = hashlib.sha256()
    for rel, full in _files(Path(path)):
        try:
            st = os.stat(full)
            stats.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        except OSError:
            stats.update(f"{rel}\0?\n".encode())
    key = f"{path}\0{stats.hexdigest()}"
    if key not in _digests:
        _digests[key] = _content_digest(path)
    return _digests[key]


def _content_digest(path: str) -> str:
    h = hashlib.sha256()
    for rel, full in _files(Path(path)):
        h.update(rel.encode() + b"\0")
        try:
            with open(full, "rb") as f:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
        except OSError:
            h.update(b"\0unreadable")
        h.update(b"\0")
    return h.hexdigest()[:16]
