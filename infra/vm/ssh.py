"""An SSH tunnel from this machine to a cloud head's Ray dashboard / Jobs API (never opened publicly).

Test hook: when DLRUN_TEST_HEAD_ADDRESS is set (e.g. http://127.0.0.1:8265), open_tunnel returns
that address without running ssh, so end-to-end tests can map a provisioned head to a local Ray head.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from infra.base import Cluster, ProvisionError
from infra.paths import dlrun_home

TEST_HEAD_ADDRESS_ENV = "DLRUN_TEST_HEAD_ADDRESS"


class Tunnel:
    """A running `ssh -N -L` (or the test address); use as a context manager or call close()."""

    def __init__(self, local_address: str, process: subprocess.Popen | None = None):
        self.local_address = local_address
        self.process = process

    def close(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Tunnel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _known_hosts() -> Path:
    return dlrun_home() / "known_hosts"


def ssh_command(cluster: Cluster, local_port: int, remote_port: int) -> list[str]:
    head = cluster.head
    host = (head.public_ip or head.private_ip) if head else ""
    if not host:
        raise ProvisionError(f"cluster {cluster.cluster_id} has no head address to tunnel to",
                             cloud=cluster.provider)
    cmd = ["ssh", "-N", "-L", f"127.0.0.1:{local_port}:127.0.0.1:{int(remote_port)}",
           "-o", "StrictHostKeyChecking=accept-new", "-o", "ExitOnForwardFailure=yes",
           "-o", "BatchMode=yes", "-o", "ServerAliveInterval=30", "-o", "ConnectTimeout=15",
           "-o", f"UserKnownHostsFile={_known_hosts()}"]
    if cluster.ssh_key_path:
        cmd += ["-i", cluster.ssh_key_path, "-o", "IdentitiesOnly=yes"]
    return cmd + [f"{cluster.ssh_user or 'ubuntu'}@{host}"]


def open_tunnel(cluster: Cluster, remote_port: int = 8265, *, timeout_s: float = 60.0) -> Tunnel:
    """Forward a free local port to the head's 127.0.0.1:remote_port; waits until it accepts."""
    if os.environ.get(TEST_HEAD_ADDRESS_ENV):
        return Tunnel(os.environ[TEST_HEAD_ADDRESS_ENV].rstrip("/"))
    if not shutil.which("ssh"):
        raise ProvisionError("the `ssh` client is needed to reach a cloud head; install OpenSSH",
                             cloud=cluster.provider)
    local_port = _free_port()
    proc = subprocess.Popen(ssh_command(cluster, local_port, remote_port), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tunnel = Tunnel(f"http://127.0.0.1:{local_port}", proc)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = (proc.stderr.read() if proc.stderr else "").strip().splitlines()
            raise ProvisionError(f"SSH tunnel to {cluster.cluster_id} failed: "
                                 f"{err[-1] if err else f'ssh exited with {proc.returncode}'}",
                                 cloud=cluster.provider)
        try:
            with socket.create_connection(("127.0.0.1", local_port), timeout=1):
                return tunnel
        except OSError:
            time.sleep(0.2)
    tunnel.close()
    raise ProvisionError(f"SSH tunnel to {cluster.cluster_id} not up after {timeout_s:.0f}s",
                         cloud=cluster.provider)
