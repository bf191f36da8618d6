"""What a job ships (its working_dir and py_modules), as packages the Ray head holds.

Ray's SDK zips and hashes a directory on every submit, and importing it costs about a second. dlrun
remembers, per directory fingerprint (every file's path, size and mtime, minus what the runtime_env
excludes), the package URI Ray's own packaging gave it; when the head still holds that package, the
submission names it and nothing is imported, zipped or uploaded. Otherwise Ray's packaging code
builds and uploads it as `ray job submit` would (its log lines go to the job's log, not the screen).
"""
from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from orchestrator.settings import env_str

CACHE_FILE = "packages.json"
CACHE_SIZE = 256
IGNORE_GITIGNORE_ENV = "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"  # ray_constants.RAY_RUNTIME_ENV_IGNORE_GITIGNORE


def ray_version() -> str:
    """The installed Ray's version, without importing Ray (a second of imports)."""
    from importlib.metadata import version

    return version("ray")


def _local(value) -> bool:
    return isinstance(value, str) and "://" not in value


def _excluded(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def fingerprint(path: str | Path, *, include_parent_dir: bool, excludes: list[str]) -> str | None:
    """A digest that changes whenever the package Ray would build from `path` could change; None for
    what is not a directory (a wheel, a zip: Ray handles those itself)."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        return None
    # a pattern without '/' excludes a name at any depth (gitwildmatch); others are left to Ray, and
    # the digest then covers more files than the package, which only costs a needless rebuild
    names = [p for p in excludes if "/" not in p]
    h = hashlib.sha256(json.dumps([root.name if include_parent_dir else "", sorted(excludes),
                                   env_str(IGNORE_GITIGNORE_ENV), ray_version()]).encode())
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):  # Ray follows links too
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if not _excluded(d, names))
        for d in dirnames:
            h.update(f"{rel}/{d}/\n".encode())
        for f in sorted(filenames):
            if _excluded(f, names):
                continue
            try:
                st = os.stat(os.path.join(dirpath, f))
            except OSError:
                continue
            h.update(f"{rel}/{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _cache_path() -> Path:
    from orchestrator.paths import dlrun_home

    return dlrun_home() / CACHE_FILE


def _load_cache() -> dict[str, str]:
    try:
        data = json.loads(_cache_path().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_cache(cache: dict[str, str]) -> None:
    path = _cache_path()
    keep = dict(list(cache.items())[-CACHE_SIZE:])
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(keep))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _wanted(env: dict) -> list[tuple[str, int | None, str, bool]]:
    """(field, index, local path, include_parent_dir) of what must become a package URI."""
    out = []
    if _local(env.get("working_dir")):
        out.append(("working_dir", None, env["working_dir"], False))
    for i, m in enumerate(env.get("py_modules") or []):
        if _local(m):
            out.append(("py_modules", i, m, True))
    return out


def _put(env: dict, field: str, index: int | None, uri: str) -> None:
    if index is None:
        env[field] = uri
    else:
        env[field][index] = uri


def resolve_packages(jobs, runtime_env: dict, log: Callable[[str], None] | None = None) -> dict:
    """runtime_env with every local working_dir / py_modules path replaced by the URI of a package the
    head holds (uploading it first when needed). `jobs`: the cluster's RayJobs."""
    env = copy.deepcopy(runtime_env)
    wanted = _wanted(env)
    if not wanted:
        return env
    excludes = list(env.get("excludes") or [])
    cache = _load_cache()
    prints = [fingerprint(path, include_parent_dir=parent, excludes=excludes) for _, _, path, parent in wanted]
    known = [cache.get(fp) if fp else None for fp in prints]
    held = _held(jobs, known)
    if held is not None:
        for (field, index, _, _), uri in zip(wanted, held, strict=True):
            _put(env, field, index, uri)
        return env
    upload_with_ray(jobs, env, log)
    for (field, index, _, _), fp in zip(wanted, prints, strict=True):
        uri = env[field] if index is None else env[field][index]
        if fp and not _local(uri):
            cache.pop(fp, None)
            cache[fp] = uri
    _save_cache(cache)
    return env


def _held(jobs, uris: list[str | None]) -> list[str] | None:
    """The URIs when the head holds every one of them, else None (asking no further after a miss)."""
    held = []
    for uri in uris:
        if not uri or not jobs.has_package(uri):
            return None
        held.append(uri)
    return held


def upload_with_ray(jobs, env: dict, log: Callable[[str], None] | None = None) -> None:
    """Ray's own packaging: zip, hash and upload what the head lacks; env's paths become URIs."""
    from ray.job_submission import JobSubmissionClient

    with ray_logs_to(log):
        client = JobSubmissionClient(jobs.address, headers=dict(jobs.headers) or None)
        client._upload_working_dir_if_needed(env)
        client._upload_py_modules_if_needed(env)


class _LineHandler(logging.Handler):
    def __init__(self, write: Callable[[str], None]):
        super().__init__()
        self.write = write
        self.setFormatter(logging.Formatter("%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.write(self.format(record))
        except Exception:
            pass


@contextmanager
def ray_logs_to(write: Callable[[str], None] | None):
    """Ray's log records (e.g. 'Package gcs://... already exists, skipping upload.') go to `write`
    (None: dropped) instead of Ray's handler on the terminal, for the duration."""
    logger = logging.getLogger("ray")
    saved = (logger.handlers[:], logger.propagate)
    logger.handlers = [_LineHandler(write or (lambda line: None))]
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved
