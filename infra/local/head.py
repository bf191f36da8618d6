"""Starting, attaching to and stopping the local Ray head.

A head that dlrun starts runs as `ray start --head --block` in its own session; its process
group id is recorded in $DLRUN_HOME/local_head.json, and `dlrun down` signals exactly that group
(never `ray stop`, which would kill every Ray process on the machine).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from infra.base import ProvisionError
from infra.paths import dlrun_home
from infra.reach import dashboard_alive, free_port, port_free, wait_dashboard  # noqa: F401

DEFAULT_DASHBOARD_PORT = 8265


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


def _record_path() -> Path:
    return dlrun_home() / "local_head.json"


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_size(pgid: int) -> int | None:
    """How many live (not zombie) processes the group has (None where /proc cannot say)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    count = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        except OSError:
            continue
        count += fields[0] != "Z" and int(fields[2]) == pgid  # a zombie is dead: its parent only has to reap it
    return count


def _wait_group(pgid: int, wait: float) -> None:
    """Until the group is gone, or `wait` has passed. Ray's processes leave SIGTERM in a second or two,
    then stay zombies until reaped: the `ray start` leader by this process when it started the head
    (reaped here: else the wait ran into the SIGKILL and its 5 s), the rest by init."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and _group_alive(pgid):
        if _group_size(pgid) == 0:
            try:
                os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.1)


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
    if head.pgid and _group_alive(head.pgid) and dashboard_alive(head.dashboard_url):
        return head
    if head.pgid and _group_alive(head.pgid):
        return head  # still starting up or busy; let the caller wait for it
    p.unlink(missing_ok=True)
    return None


def ensure_local_head(*, dashboard_port: int | None = None, num_cpus: int | None = None,
                      timeout: float = 90.0) -> LocalHead:
    """Attach to dlrun's head, or to a Ray head already on the dashboard port, or start one."""
    head = recorded_head()
    if head:
        wait_dashboard(head.dashboard_url, timeout, what="the local Ray head")
        return head
    explicit = os.environ.get("DLRUN_RAY_ADDRESS")
    if explicit:
        if not dashboard_alive(explicit, timeout=3):
            raise ProvisionError(f"DLRUN_RAY_ADDRESS={explicit}: no Ray dashboard answers there; "
                                 "start Ray or unset the variable", cloud="local")
        return LocalHead(dashboard_url=explicit, gcs_address="", pgid=None, started_by_dlrun=False)
    port = dashboard_port or int(os.environ.get("DLRUN_DASHBOARD_PORT", DEFAULT_DASHBOARD_PORT))
    url = f"http://127.0.0.1:{port}"
    if dashboard_alive(url):
        return LocalHead(dashboard_url=url, gcs_address="", pgid=None, started_by_dlrun=False)
    return start_local_head(dashboard_port=free_port(port), num_cpus=num_cpus, timeout=timeout)


def start_local_head(*, dashboard_port: int, num_cpus: int | None = None, timeout: float = 90.0) -> LocalHead:
    gcs_port = free_port(6379)
    metrics_port = free_port()
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray") or "ray"
    # its own temp dir: Ray points job drivers at the cluster named in <temp-dir>/ray_current_cluster,
    # which in the shared /tmp/ray is whichever head started last. Short: Ray's socket paths are limited.
    temp_dir = tempfile.mkdtemp(prefix="dlrun-ray-", dir="/tmp")
    cmd = [ray_bin, "start", "--head", "--block", "--disable-usage-stats",
           f"--port={gcs_port}", "--node-ip-address=127.0.0.1",
           "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard_port}",
           f"--metrics-export-port={metrics_port}", "--include-dashboard=true", f"--temp-dir={temp_dir}",
           # Ray's fixed default ports (agent 52365, client 10001, ...) clash with any other Ray on
           # this machine and the losing head never gets a job agent: take free ones
           f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
           f"--runtime-env-agent-port={free_port()}", f"--ray-client-server-port={free_port()}",
           f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}"]
    if num_cpus:
        cmd.append(f"--num-cpus={num_cpus}")
    # token authentication, with dlrun's own token (never ~/.ray/auth_token, which any earlier local
    # ray.init() may have written): a process on this machine or the LAN without it can neither run
    # tasks through the GCS nor use the Jobs API; job drivers inherit the token from the head
    from infra.auth import LOCAL, ensure_token, token_path

    ensure_token(LOCAL)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN_PATH=str(token_path(LOCAL)))
    env.pop("RAY_AUTH_TOKEN", None)
    log = open(dlrun_home() / "local_head.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    head = LocalHead(dashboard_url=f"http://127.0.0.1:{dashboard_port}", gcs_address=f"127.0.0.1:{gcs_port}",
                     pgid=proc.pid, started_by_dlrun=True, metrics_port=metrics_port, started_at=time.time(),
                     temp_dir=temp_dir, token_path=str(token_path(LOCAL)))
    _record_path().write_text(json.dumps(asdict(head)))
    try:
        wait_dashboard(head.dashboard_url, timeout, proc=proc, what="the local Ray head",
                       log_hint=f"; see {dlrun_home() / 'local_head.log'}")
    except BaseException:
        stop_local_head(head)
        raise
    return head


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
        _wait_group(head.pgid, wait)
        if not _group_alive(head.pgid):
            break
    rec = _record_path()
    if rec.exists() and json.loads(rec.read_text()).get("pgid") == head.pgid:
        rec.unlink()
    if head.temp_dir and Path(head.temp_dir).name.startswith("dlrun-ray-"):
        shutil.rmtree(head.temp_dir, ignore_errors=True)
    return True


def local_head_headers(address: str) -> dict[str, str]:
    """The bearer header for the local head dlrun started at `address` (none for another head: a user
    reaches that one with Ray's own RAY_AUTH_MODE / RAY_AUTH_TOKEN_PATH settings)."""
    from infra.auth import LOCAL, bearer, read_token

    head = recorded_head()
    if head is None or not head.started_by_dlrun or head.dashboard_url.rstrip("/") != address.rstrip("/"):
        return {}
    return bearer(read_token(LOCAL))
