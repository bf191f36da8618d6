"""Ray Jobs API client, and starting/attaching/stopping the local Ray head.

A head that dlrun starts runs as `ray start --head --block` in its own session; its process
group id is recorded in $DLRUN_HOME/local_head.json, and `dlrun down` signals exactly that group
(never `ray stop`, which would kill every Ray process on the machine).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.state.db import dlrun_home

DEFAULT_DASHBOARD_PORT = 8265
TERMINAL_RAY_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass
class LocalHead:
    dashboard_url: str  # http://127.0.0.1:PORT — the Jobs API and the dashboard
    gcs_address: str  # 127.0.0.1:PORT
    pgid: int | None  # process group dlrun started; None when attached to someone else's head
    started_by_dlrun: bool
    metrics_port: int | None = None
    started_at: float = 0.0
    temp_dir: str | None = None  # the head's own Ray --temp-dir (sessions, logs)


def _record_path() -> Path:
    return dlrun_home() / "local_head.json"


def free_port(preferred: int | None = None) -> int:
    if preferred and port_free(preferred):
        return preferred
    # all interfaces: Ray binds most of its ports on the node's own address, not on 127.0.0.1
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def dashboard_alive(url: str, timeout: float = 1.0) -> bool:
    """True when a Ray dashboard (Jobs API) answers at url."""
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=timeout) as r:
            return r.status == 200 and "ray_version" in json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        # a head with token authentication answers 401 to a request without its token: it is up,
        # and JobSubmissionClient sends the token when RAY_AUTH_MODE=token is set
        return e.code == 401
    except Exception:
        return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


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
        _wait_dashboard(head.dashboard_url, timeout)
        return head
    explicit = os.environ.get("DLRUN_RAY_ADDRESS")
    if explicit:
        if not dashboard_alive(explicit, timeout=3):
            from orchestrator.errors import UsageError
            raise UsageError(f"DLRUN_RAY_ADDRESS={explicit}: no Ray dashboard answers there; "
                             "start Ray or unset the variable")
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
    # Ray >= 2.5x turns token authentication on by itself once ~/.ray/auth_token exists (any earlier
    # local ray.init() writes one), and then refuses every client that lacks it. The head dlrun starts
    # listens on 127.0.0.1 only; its auth mode is explicit: the user's RAY_AUTH_MODE, else disabled.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0",
               RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"))
    log = open(dlrun_home() / "local_head.log", "ab")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    head = LocalHead(dashboard_url=f"http://127.0.0.1:{dashboard_port}", gcs_address=f"127.0.0.1:{gcs_port}",
                     pgid=proc.pid, started_by_dlrun=True, metrics_port=metrics_port, started_at=time.time(),
                     temp_dir=temp_dir)
    _record_path().write_text(json.dumps(asdict(head)))
    try:
        _wait_dashboard(head.dashboard_url, timeout, proc=proc)
    except BaseException:
        stop_local_head(head)
        raise
    return head


def _wait_dashboard(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dashboard_alive(url, timeout=1.0):
            return
        if proc is not None and proc.poll() is not None:
            from orchestrator.errors import ProvisioningFailedError
            raise ProvisioningFailedError(
                f"the local Ray head exited (code {proc.returncode}); see {dlrun_home() / 'local_head.log'}")
        time.sleep(0.25)
    from orchestrator.errors import ProvisioningFailedError
    raise ProvisioningFailedError(f"the local Ray head did not answer at {url} within {timeout:.0f} s")


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
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _group_alive(head.pgid):
            time.sleep(0.2)
        if not _group_alive(head.pgid):
            break
    rec = _record_path()
    if rec.exists() and json.loads(rec.read_text()).get("pgid") == head.pgid:
        rec.unlink()
    if head.temp_dir and Path(head.temp_dir).name.startswith("dlrun-ray-"):
        shutil.rmtree(head.temp_dir, ignore_errors=True)
    return True


class RayJobs:
    """The Ray Jobs API of one cluster (a thin layer over JobSubmissionClient)."""

    def __init__(self, address: str):
        from ray.job_submission import JobSubmissionClient

        self.address = address
        self.client = JobSubmissionClient(address)

    def submit(self, *, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict,
               entrypoint_num_gpus: float | None = None, agent_wait_s: float = 120.0) -> str:
        # Ray job metadata values must be strings
        meta = {str(k): str(v) for k, v in metadata.items() if v is not None}
        deadline = time.monotonic() + agent_wait_s
        while True:
            try:
                return self.client.submit_job(entrypoint=entrypoint, submission_id=submission_id,
                                              runtime_env=runtime_env, metadata=meta,
                                              entrypoint_num_gpus=entrypoint_num_gpus)
            except RuntimeError as e:
                # a head that has just come up answers before its job agent is ready
                if "No available agent" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def status(self, submission_id: str) -> str:
        return str(self.client.get_job_status(submission_id).value)

    def info(self, submission_id: str):
        return self.client.get_job_info(submission_id)

    def logs(self, submission_id: str) -> str:
        return self.client.get_job_logs(submission_id)

    def stop(self, submission_id: str) -> bool:
        try:
            return self.client.stop_job(submission_id)
        except Exception:
            return False

    def list(self):
        return self.client.list_jobs()
