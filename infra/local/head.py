"""Starting, attaching to and stopping the local Ray head.

A Ray head dlrun did not start is used only when dlrun can run jobs on it: one that wants a token dlrun
does not have, or runs another Ray version, is never attached to (someone else's head on a shared
machine, or the one `make demo` left under another DLRUN_HOME); dlrun starts its own on free ports.
A head that dlrun starts runs as `ray start --head --block` in its own session; its process
group id is recorded in $DLRUN_HOME/local_head.json, and `dlrun down` signals exactly that group
(never `ray stop`, which would kill every Ray process on the machine).

A head is ready when its Jobs API answers a request with dlrun's token (infra.reach.wait_jobs_api), not when
its port opens. A first start in a new venv on a busy machine is slow (Python imports its packages from a
cold disk cache); Ray's own start-up deadlines are raised to dlrun's (RAY_START_DEADLINES) and the wait says
how long it has waited. An attempt that fails is stopped whole (its process group, any of its processes that
left the group, its temp dir) before the next one starts.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from infra.base import CredentialsError, ProvisionError
from infra.local.process_groups import group_alive, kill_strays, wait_group
from infra.paths import dlrun_home
from infra.reach import (RAY_NODE_PORT_FLAGS, HeadExited, ask_head, dashboard_alive, free_port,  # noqa: F401
                         free_port_flags, free_ports, port_free, wait_dashboard, wait_jobs_api)

DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_GCS_PORT = 6379
START_TRIES = 3  # two dlrun processes (two users) may pick the same free port at once: the loser retries
HEAD_START_ENV = "DLRUN_HEAD_START_S"  # seconds a local head may take until its Jobs API answers (all tries)
HEAD_START_S = 180.0
RAY_BIN_ENV = "DLRUN_RAY_BIN"  # the `ray` executable the local head is started with
MIN_TRY_S = 15.0  # a retry with less time left than this would only fail again
# Ray 2.60's deadlines inside `ray start --head`, raised for a slow first start unless the user set them
# (read in the installed package): the node's registration with the GCS ("The current node timed out during
# startup", ray/_private/node.py: a fixed 30 s loop around GlobalStateAccessor::GetNode, which itself retries
# for RAY_raylet_start_wait_time_s) and the dashboard's (RAY_DASHBOARD_STARTUP_TIMEOUT_S,
# ray/_private/ray_constants.py, default 60 s, ray/_private/services.py start_api_server)
RAY_START_DEADLINES = {"RAY_raylet_start_wait_time_s": "120", "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "120"}
Progress = Callable[[str], None]


def head_start_s() -> float:
    try:
        return float(os.environ.get(HEAD_START_ENV) or HEAD_START_S)
    except ValueError:
        raise ProvisionError(f"{HEAD_START_ENV}={os.environ[HEAD_START_ENV]!r} is not a number of seconds; "
                             f"unset it or set e.g. {HEAD_START_ENV}={HEAD_START_S:.0f}", cloud="local") from None


def head_log() -> Path:
    """Where the local head's own output goes (Ray's start-up errors among it)."""
    return dlrun_home() / "local_head.log"


def ray_executable() -> str:
    """DLRUN_RAY_BIN, else the `ray` beside dlrun's Python (its venv), else the one on PATH."""
    chosen = os.environ.get(RAY_BIN_ENV)
    if chosen:
        found = shutil.which(os.path.expanduser(chosen))
        if not found:
            raise ProvisionError(f"{RAY_BIN_ENV}={chosen}: no such executable; point it at a `ray` "
                                 "or unset it", cloud="local")
        return found
    return shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray") or "ray"


@dataclass
class LocalHead:
    dashboard_url: str  # http://127.0.0.1:PORT — the Jobs API and the dashboard
    gcs_address: str  # 127.0.0.1:PORT
    pgid: int | None  # process group dlrun started; None when attached to someone else's head
    started_by_dlrun: bool
    metrics_port: int | None = None
    started_at: float = 0.0
    temp_dir: str | None = None  # the head's own Ray --temp-dir (sessions, logs)
    token_path: str | None = None  # its Ray auth token (heads dlrun starts run with token auth)
    notice: str = ""  # what the user is told once: a head on the dashboard port was passed over


def _record_path() -> Path:
    return dlrun_home() / "local_head.json"


def recorded_head() -> LocalHead | None:
    """The head dlrun started earlier, if it is still up."""
    p = _record_path()
    if not p.exists():
        return None
    try:
        head = LocalHead(**json.loads(p.read_text()))
    except (ValueError, TypeError):
        p.unlink(missing_ok=True)
        return None
    if head.pgid and group_alive(head.pgid) and dashboard_alive(head.dashboard_url):
        return head
    if head.pgid and group_alive(head.pgid):
        return head  # still starting up or busy; let the caller wait for it
    p.unlink(missing_ok=True)
    return None


@dataclass(frozen=True)
class Unusable:
    """Why dlrun cannot run jobs on a Ray head it did not start."""

    reason: str
    wants_token: bool  # token authentication, and no token (or a refused one) in Ray's own settings


def why_unusable(url: str) -> Unusable | None:
    """None when dlrun can run jobs on the Ray head at url. Asked with the token Ray's own clients would
    send (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN[_PATH])."""
    from infra.auth import bearer, ray_env_token
    from infra.vm.provider import local_ray_version

    token = ray_env_token()
    answer = ask_head(url, headers=bearer(token), timeout=3.0)
    if answer.wants_token:
        return Unusable("it refused the Ray token in RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH" if token else
                        "it wants a Ray token (token authentication) and none is set", wants_token=True)
    ours = local_ray_version("local")
    if answer.ray_version and answer.ray_version.split(".")[:2] != ours.split(".")[:2]:
        return Unusable(f"it runs Ray {answer.ray_version}, and dlrun's jobs need Ray {ours}", wants_token=False)
    return None


def check_explicit_head(url: str) -> None:
    """DLRUN_RAY_ADDRESS names a head dlrun must use as it is: one line saying why it cannot, and how."""
    if not dashboard_alive(url, timeout=3):
        raise ProvisionError(f"DLRUN_RAY_ADDRESS={url}: no Ray dashboard answers there; "
                             "start Ray or unset the variable", cloud="local")
    why = why_unusable(url)
    if why is not None and why.wants_token:
        raise CredentialsError(f"DLRUN_RAY_ADDRESS={url}: {why.reason}; pass that head's token as Ray's clients "
                               "take it: RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH=<its token file> (or "
                               "RAY_AUTH_TOKEN=<token>), or unset DLRUN_RAY_ADDRESS to use a head of dlrun's own",
                               cloud="local")
    if why is not None:
        raise ProvisionError(f"DLRUN_RAY_ADDRESS={url}: {why.reason}; point it at a head of that version or "
                             "unset it to use a head of dlrun's own", cloud="local")


@contextmanager
def _one_starter():
    """One dlrun process of this DLRUN_HOME at a time decides whether to start the head (two submits at
    once would start two heads, and the record would name only the second)."""
    with open(dlrun_home() / "local_head.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_local_head(*, dashboard_port: int | None = None, num_cpus: int | None = None,
                      timeout: float | None = None, progress: Progress | None = None) -> LocalHead:
    """Attach to dlrun's head, or to a usable Ray head already on the dashboard port, or start one.
    timeout: for the head's start, all tries together (DLRUN_HEAD_START_S); progress(line): said while waiting."""
    with _one_starter():
        return _ensure_local_head(dashboard_port, num_cpus, head_start_s() if timeout is None else timeout, progress)


def _ensure_local_head(dashboard_port: int | None, num_cpus: int | None, timeout: float,
                       progress: Progress | None) -> LocalHead:
    head = recorded_head()
    if head:
        _wait_ready(head, timeout, None, progress)
        return head
    explicit = os.environ.get("DLRUN_RAY_ADDRESS")
    if explicit:
        check_explicit_head(explicit)
        return LocalHead(dashboard_url=explicit, gcs_address="", pgid=None, started_by_dlrun=False)
    port = dashboard_port or int(os.environ.get("DLRUN_DASHBOARD_PORT", DEFAULT_DASHBOARD_PORT))
    url = f"http://127.0.0.1:{port}"
    passed_over = None
    if dashboard_alive(url):
        passed_over = why_unusable(url)
        if passed_over is None:
            return LocalHead(dashboard_url=url, gcs_address="", pgid=None, started_by_dlrun=False)
    started = _start_with_retries(port, num_cpus, timeout, progress)
    if passed_over:
        started.notice = (f"the Ray head on {url} is not dlrun's ({passed_over.reason}); started dlrun's own on "
                          f"{started.dashboard_url} (`dlrun down` stops it)")
    return started


def _start_with_retries(port: int, num_cpus: int | None, timeout: float, progress: Progress | None) -> LocalHead:
    """Tries until one head answers, within `timeout` for all of them: a try whose head exited (a port taken
    meanwhile, Ray's own start-up deadline) is stopped whole, and the next one takes other free ports."""
    deadline = time.monotonic() + timeout
    for attempt in range(1, START_TRIES + 1):
        left = deadline - time.monotonic()
        try:  # Ray's usual ports when free; on a retry, other free ones
            return start_local_head(dashboard_port=free_port(port if attempt == 1 else None), num_cpus=num_cpus,
                                    timeout=left, gcs_port=free_port(DEFAULT_GCS_PORT if attempt == 1 else None),
                                    progress=progress)
        except HeadExited as e:
            left = deadline - time.monotonic()
            if attempt == START_TRIES or left < MIN_TRY_S:
                raise HeadExited(f"{e.message} (try {attempt} of {START_TRIES})", cloud="local") from None
            if progress is not None:
                progress(f"{e.message}; trying again (try {attempt + 1} of {START_TRIES})")
    raise AssertionError("unreachable: the last attempt returns or raises")


def start_local_head(*, dashboard_port: int, num_cpus: int | None = None, timeout: float | None = None,
                     gcs_port: int | None = None, progress: Progress | None = None) -> LocalHead:
    timeout = head_start_s() if timeout is None else timeout
    gcs_port = gcs_port or free_port(DEFAULT_GCS_PORT)
    metrics_port = free_ports(1, (gcs_port, dashboard_port))[0]
    ray_bin = ray_executable()
    # its own temp dir: Ray points job drivers at the cluster named in <temp-dir>/ray_current_cluster,
    # which in the shared /tmp/ray is whichever head started last. Short: Ray's socket paths are limited.
    temp_dir = tempfile.mkdtemp(prefix="dlrun-ray-", dir="/tmp")
    cmd = [ray_bin, "start", "--head", "--block", "--disable-usage-stats",
           f"--port={gcs_port}", "--node-ip-address=127.0.0.1",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
           f"--metrics-export-port={metrics_port}", "--include-dashboard=true", f"--temp-dir={temp_dir}",
           # Ray's fixed default ports (agent 52365, client 10001, ...) clash with any other Ray on
           # this machine and the losing head never gets a job agent: take free ones
           *free_port_flags((*RAY_NODE_PORT_FLAGS, "--ray-client-server-port"),
                            (metrics_port, gcs_port, dashboard_port))]
    if num_cpus:
        cmd.append(f"--num-cpus={num_cpus}")
    # token authentication, with dlrun's own token (never ~/.ray/auth_token, which any earlier local
    # ray.init() may have written): a process on this machine or the LAN without it can neither run
    # tasks through the GCS nor use the Jobs API; job drivers inherit the token from the head
    from infra.auth import LOCAL, ensure_token, token_path

    ensure_token(LOCAL)
    env = {**RAY_START_DEADLINES, **os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN_PATH": str(token_path(LOCAL))}
    env.pop("RAY_AUTH_TOKEN", None)
    log_path = head_log()
    with open(log_path, "ab") as log:
        log_from = log.tell()
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} dlrun starts a Ray head: {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        except OSError as e:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise ProvisionError(f"could not start the local Ray head ({ray_bin}: {e.strerror}); install Ray "
                                 f"in dlrun's venv (make setup) or set {RAY_BIN_ENV}", cloud="local") from None
    head = LocalHead(dashboard_url=f"http://127.0.0.1:{dashboard_port}", gcs_address=f"127.0.0.1:{gcs_port}",
                     pgid=proc.pid, started_by_dlrun=True, metrics_port=metrics_port, started_at=time.time(),
                     temp_dir=temp_dir, token_path=str(token_path(LOCAL)))
    _record_path().write_text(json.dumps(asdict(head)))
    try:
        _wait_ready(head, timeout, proc, progress)
    except HeadExited:
        stop_local_head(head)
        raise HeadExited(f"the local Ray head exited (code {proc.returncode}) before its Jobs API answered"
                         f"{_why(log_path, log_from)}; see {log_path}", cloud="local") from None
    except BaseException:
        stop_local_head(head)
        raise
    return head


def _why(log_path: Path, offset: int) -> str:
    """`: <Ray's last error line>` of what this start wrote to the log, or ""."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    errors = [line.strip() for line in text.splitlines() if re.search(r"(Error|Exception)\b.*:", line)]
    return f": {errors[-1][:300]}" if errors else ""


def _wait_ready(head: LocalHead, timeout: float, proc: subprocess.Popen | None, progress: Progress | None) -> None:
    """Until the head's Jobs API answers a request with the token dlrun will send."""
    from infra.auth import LOCAL, bearer, read_token

    headers = bearer(read_token(LOCAL)) if head.started_by_dlrun else {}
    try:
        wait_jobs_api(head.dashboard_url, timeout, headers, proc, what="the local Ray head",
                      log_hint=f"; see {head_log()}", progress=progress)
    except HeadExited:
        raise
    except ProvisionError as e:  # dlrun's own deadline, not Ray's
        raise ProvisionError(f"{e.message} ({HEAD_START_ENV} gives a slow machine more time)",
                             cloud="local") from None


def stop_local_head(head: LocalHead | None = None, timeout: float = 6.0) -> bool:
    """Stop the head dlrun started (its process group only). False when there was none."""
    head = head or recorded_head()
    if head is None or not head.started_by_dlrun or not head.pgid:
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(head.pgid, sig)
        except ProcessLookupError:
            break
        wait_group(head.pgid, wait)
        if not group_alive(head.pgid):
            break
    ours = head.temp_dir and Path(head.temp_dir).name.startswith("dlrun-ray-")
    if ours:
        kill_strays(str(head.temp_dir))
    rec = _record_path()
    if rec.exists() and json.loads(rec.read_text()).get("pgid") == head.pgid:
        rec.unlink()
    if ours:
        shutil.rmtree(str(head.temp_dir), ignore_errors=True)
    return True


def local_head_headers(address: str) -> dict[str, str]:
    """The bearer header for the local head dlrun started at `address` (none for another head: a user
    reaches that one with Ray's own RAY_AUTH_MODE / RAY_AUTH_TOKEN_PATH settings)."""
    from infra.auth import LOCAL, bearer, read_token

    head = recorded_head()
    if head is None or not head.started_by_dlrun or head.dashboard_url.rstrip("/") != address.rstrip("/"):
        return {}
    return bearer(read_token(LOCAL))
