"""SSH from this machine to a cluster's nodes: commands (boot state, logs) and the tunnel to the head's
Ray dashboard / Jobs API, which is never opened publicly.

Each cluster has its own known_hosts file (made at first contact, removed with the cluster), so a
recycled public IP never meets a stale host key. $DLRUN_SSH_CONFIG names an OpenSSH config file
passed as `ssh -F` — the knob for a bastion / ProxyJump (and for emulated VMs in the tests).

Every ssh process this module starts is registered with its cluster, and so is every tunnel. Teardown
calls end_ssh(cluster) first: from then on no ssh for that cluster starts (a heartbeat, a boot poll or a
tunnel's re-open gets a ProvisionError instead), the tunnels are closed and the commands in flight are
killed and reaped. Only then is its known_hosts removed (forget_host_keys does both), so no late ssh can
write it again: `ssh -o StrictHostKeyChecking=accept-new` re-creates a missing known_hosts at its next
connection. A new launch of the same cluster id lifts the ban (allow_ssh).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from infra.base import Cluster, Node, ProvisionError
from infra.paths import dlrun_home
from infra.reach import free_port

SSH_CONFIG_ENV = "DLRUN_SSH_CONFIG"
SSH_WAIT_ENV = "DLRUN_SSH_WAIT_S"   # how long a new node may take to accept SSH (default 600 s)


def known_hosts_path(cluster_id: str) -> Path:
    d = dlrun_home() / "known_hosts"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d / cluster_id


_users = threading.Lock()
_ending: set[str] = set()                          # clusters being torn down: no new ssh
_procs: dict[str, set[subprocess.Popen]] = {}      # cluster id -> its ssh processes still running
_tunnels: dict[str, set["Tunnel"]] = {}            # cluster id -> its open tunnels


def _refused(cluster_id: str, provider: str = "") -> ProvisionError:
    return ProvisionError(f"cluster {cluster_id} is being torn down: no more SSH to it", cloud=provider)


def _start(cluster: Cluster, cmd: list[str], **popen) -> subprocess.Popen:
    """Popen of an ssh for `cluster`, registered with it; refused once the cluster's teardown began.
    Checked and registered under one lock, so end_ssh sees every process that got past the check."""
    with _users:
        if cluster.cluster_id in _ending:
            raise _refused(cluster.cluster_id, cluster.provider)
        proc = subprocess.Popen(cmd, **popen)
        _procs.setdefault(cluster.cluster_id, set()).add(proc)
    return proc


def _finished(cluster_id: str, proc: subprocess.Popen) -> None:
    with _users:
        _procs.get(cluster_id, set()).discard(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def end_ssh(cluster_id: str) -> None:
    """Stop every SSH user of the cluster and refuse new ones: its tunnels are closed, the ssh commands in
    flight (heartbeat, boot polls) killed and reaped. Idempotent; call it before removing the cluster's
    known_hosts and keys."""
    with _users:
        _ending.add(cluster_id)
        tunnels = list(_tunnels.pop(cluster_id, ()))
        procs = list(_procs.pop(cluster_id, ()))
    for tunnel in tunnels:
        tunnel.close()
    for proc in procs:
        _stop(proc)


def allow_ssh(cluster_id: str) -> None:
    """A new launch of this cluster id: SSH to it is allowed again."""
    with _users:
        _ending.discard(cluster_id)


def forget_host_keys(cluster_id: str) -> None:
    """The cluster's known_hosts, removed after every SSH user of the cluster has stopped (end_ssh)."""
    end_ssh(cluster_id)
    known_hosts_path(cluster_id).unlink(missing_ok=True)


def _ssh_binary(cluster: Cluster) -> str:
    found = shutil.which("ssh")
    if not found:
        raise ProvisionError("the `ssh` client is needed to reach a cloud node; install OpenSSH",
                             cloud=cluster.provider)
    return found


def base_command(cluster: Cluster, node: Node | None = None, *, connect_timeout: int = 10) -> list[str]:
    """`ssh` with the cluster's key, its own known_hosts and the user's config, up to the target."""
    node = node or cluster.head
    host = (node.public_ip or node.private_ip) if node else ""
    if not host:
        raise ProvisionError(f"cluster {cluster.cluster_id} has no address to reach over SSH", cloud=cluster.provider)
    cmd = [_ssh_binary(cluster)]
    if os.environ.get(SSH_CONFIG_ENV):
        cmd += ["-F", os.environ[SSH_CONFIG_ENV]]
    cmd += ["-o", "StrictHostKeyChecking=accept-new",
            "-o", f"UserKnownHostsFile={known_hosts_path(cluster.cluster_id)}",
            "-o", "BatchMode=yes", "-o", f"ConnectTimeout={connect_timeout}", "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=4", "-o", "LogLevel=ERROR"]
    if cluster.ssh_key_path:
        cmd += ["-i", cluster.ssh_key_path, "-o", "IdentitiesOnly=yes"]
    return cmd + [f"{cluster.ssh_user or 'ubuntu'}@{host}"]


def run(cluster: Cluster, command: str, node: Node | None = None, *, timeout: float = 60,
        stdin: str | None = None) -> tuple[int, str]:
    """(exit code, stdout+stderr) of a shell command on a node; 255 when SSH itself failed.
    stdin is how a secret travels (never on the command line, which `ps` shows)."""
    proc = _start(cluster, [*base_command(cluster, node), command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(input=stdin if stdin is not None else "", timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return 255, f"ssh timed out after {timeout:.0f}s"
    finally:
        _finished(cluster.cluster_id, proc)
    if proc.returncode < 0 and cluster.cluster_id in _ending:  # end_ssh stopped it
        return 255, str(_refused(cluster.cluster_id, cluster.provider))
    return proc.returncode, (out + err).strip()


def wait_for_ssh(cluster: Cluster, node: Node | None = None, *, timeout_s: float | None = None,
                 sleep=time.sleep) -> None:
    """Until the node accepts our key: sshd starts late, GCE's guest agent makes the user late."""
    timeout_s = float(os.environ.get(SSH_WAIT_ENV, 600)) if timeout_s is None else timeout_s
    deadline, delay, last = time.monotonic() + timeout_s, 1.0, ""
    while True:
        code, out = run(cluster, "true", node, timeout=30)
        if code == 0:
            return
        last = out.splitlines()[-1] if out else f"ssh exited with {code}"
        if time.monotonic() + delay > deadline:
            target = node.node_id if node else cluster.cluster_id
            raise ProvisionError(f"{target} did not accept SSH within {timeout_s:.0f}s: {last}",
                                 cloud=cluster.provider)
        sleep(delay)
        delay = min(delay * 1.5, 15.0)


def _die_with_parent() -> None:
    """Linux: the tunnel ends when dlrun does, even on kill -9 (it is in its own session, so that
    Ctrl-C reaches dlrun first and dlrun tears down in order)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Tunnel:
    """`ssh -N -L 127.0.0.1:PORT:127.0.0.1:REMOTE` to the head, re-opened on the same port when it drops."""

    def __init__(self, cluster: Cluster, remote_port: int, *, check_s: float = 1.0):
        self.cluster, self.remote_port, self.check_s = cluster, int(remote_port), check_s
        self.local_port = free_port()
        self.local_address = f"http://127.0.0.1:{self.local_port}"
        self.reopened = 0
        self._proc: subprocess.Popen | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    def _spawn(self) -> subprocess.Popen:
        forward = f"127.0.0.1:{self.local_port}:127.0.0.1:{self.remote_port}"
        cmd = base_command(self.cluster)
        cmd[1:1] = ["-N", "-o", "ExitOnForwardFailure=yes", "-L", forward]
        return _start(self.cluster, cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=_die_with_parent)

    def open(self, timeout_s: float = 60.0) -> "Tunnel":
        deadline = time.monotonic() + timeout_s
        cid = self.cluster.cluster_id
        with _users:  # registered first: end_ssh closes it even while it is still opening
            if cid in _ending:
                raise _refused(cid, self.cluster.provider)
            _tunnels.setdefault(cid, set()).add(self)
        try:
            self._proc = self._spawn()
        except BaseException:
            self.close()
            raise
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = (self._proc.stderr.read() if self._proc.stderr else "").strip().splitlines()
                raise ProvisionError(f"SSH tunnel to {self.cluster.cluster_id} failed: "
                                     f"{err[-1] if err else f'ssh exited with {self._proc.returncode}'}",
                                     cloud=self.cluster.provider)
            if self._accepts():
                self._watcher = threading.Thread(target=self._keep_open, daemon=True,
                                                 name=f"tunnel-{self.cluster.cluster_id}")
                self._watcher.start()
                return self
            time.sleep(0.2)
        self.close()
        raise ProvisionError(f"SSH tunnel to {self.cluster.cluster_id} not up after {timeout_s:.0f}s",
                             cloud=self.cluster.provider)

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.local_port), timeout=1):
                return True
        except OSError:
            return False

    def _keep_open(self) -> None:
        """A dropped connection (Wi-Fi blip, laptop sleep) is re-opened, with a growing pause."""
        delay = self.check_s
        while not self._closed.wait(delay):
            with self._lock:
                if self._closed.is_set() or self._proc is None or self._proc.poll() is None:
                    delay = self.check_s
                    continue
                _finished(self.cluster.cluster_id, self._proc)
                try:
                    self._proc = self._spawn()
                except ProvisionError:  # the cluster is being torn down: never re-opened
                    self._closed.set()
                    return
                self.reopened += 1
            delay = min(delay * 2, 30.0)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            proc, self._proc = self._proc, None
        with _users:
            _tunnels.get(self.cluster.cluster_id, set()).discard(self)
            if proc is not None:
                _procs.get(self.cluster.cluster_id, set()).discard(proc)
        if proc is not None:
            _stop(proc)
        if proc and proc.stderr:
            proc.stderr.close()

    def __enter__(self) -> "Tunnel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_tunnel(cluster: Cluster, remote_port: int = 8265, *, timeout_s: float = 60.0) -> Tunnel:
    """Forward a free local port to the head's 127.0.0.1:remote_port; waits until it accepts."""
    return Tunnel(cluster, remote_port).open(timeout_s)
