"""Reaching a Ray head: free local ports, whether its dashboard and its Jobs API answer, waiting until they do."""
from __future__ import annotations

import json
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Callable
import urllib.error
import urllib.request

from infra.base import ProvisionError


def free_port(preferred: int | None = None) -> int:
    if preferred and port_free(preferred):
        return preferred
    # all interfaces: Ray binds most of its ports on the node's own address, not on 127.0.0.1
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def free_ports(count: int, taken: tuple[int, ...] = ()) -> list[int]:
    """count distinct free ports, none of them in taken: the kernel may hand the same one out twice in a row,
    and a Ray node whose servers were given one port twice exits at start."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports and port not in taken:
            ports.append(port)
    return ports


# the ports every Ray node opens; Ray's fixed defaults (agent 52365, ...) clash with any other Ray on this machine
RAY_NODE_PORT_FLAGS = ("--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
                       "--node-manager-port", "--object-manager-port")


def free_port_flags(flags: tuple[str, ...], taken: tuple[int, ...] = ()) -> list[str]:
    """`--flag=PORT` for each flag, every port free, distinct and not in taken."""
    return [f"{flag}={port}" for flag, port in zip(flags, free_ports(len(flags), taken), strict=True)]


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


class HeadExited(ProvisionError):
    """The head's process ended before its dashboard answered (a port taken meanwhile, among others)."""


@dataclass(frozen=True)
class HeadAnswer:
    """What a Ray dashboard said to GET /api/version: nothing (not up), 200 with its Ray version, or
    401/403 (token authentication: up, but not for a request without its token)."""

    code: int | None = None
    ray_version: str = ""

    @property
    def alive(self) -> bool:
        return self.code == 200 and bool(self.ray_version) or self.code in (401, 403)

    @property
    def wants_token(self) -> bool:
        return self.code in (401, 403)


def ask_head(url: str, headers: dict[str, str] | None = None, timeout: float = 1.0) -> HeadAnswer:
    req = urllib.request.Request(f"{url.rstrip('/')}/api/version", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return HeadAnswer(r.status, str(json.loads(r.read() or b"{}").get("ray_version") or ""))
    except urllib.error.HTTPError as e:
        return HeadAnswer(e.code)
    except Exception:
        return HeadAnswer()


def dashboard_alive(url: str, timeout: float = 1.0) -> bool:
    """True when a Ray dashboard (Jobs API) answers at url: a head with token authentication answers
    401 to a request without its token, and is up all the same."""
    return ask_head(url, timeout=timeout).alive


def wait_dashboard(url: str, timeout: float, proc: subprocess.Popen | None = None, *,
                   what: str = "the Ray head", log_hint: str = "", cloud: str = "local") -> None:
    """Until the dashboard at url answers; ProvisionError when proc exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dashboard_alive(url, timeout=1.0):
            return
        if proc is not None and proc.poll() is not None:
            raise HeadExited(f"{what} exited (code {proc.returncode}){log_hint}", cloud=cloud)
        time.sleep(0.25)
    raise ProvisionError(f"{what} did not answer at {url} within {timeout:.0f} s{log_hint}", cloud=cloud)


PROGRESS_EVERY_S = 10.0  # how often a wait for a head says how long it has waited


def jobs_api_answers(url: str, headers: dict[str, str] | None = None, timeout: float = 2.0) -> bool:
    """True when the Jobs API at url lists its jobs to a request with `headers` (the head's token): the
    dashboard is up, takes the token and reaches its GCS. A port that answers, or a 401, is not enough:
    a head answers /api/version seconds before its job module can serve a request."""
    req = urllib.request.Request(f"{url.rstrip('/')}/api/jobs/", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status == 200 and isinstance(json.loads(r.read() or b"null"), list)
    except Exception:
        return False


def wait_jobs_api(url: str, timeout: float, headers: dict[str, str] | None = None,
                  proc: subprocess.Popen | None = None, *, what: str = "the Ray head", log_hint: str = "",
                  cloud: str = "local", progress: Callable[[str], None] | None = None) -> None:
    """Until the Jobs API at url answers an authenticated request (jobs_api_answers); HeadExited when proc
    exits first, ProvisionError when time runs out. progress(line), every PROGRESS_EVERY_S: how long so far."""
    start = time.monotonic()
    deadline, said = start + timeout, start
    while True:
        if jobs_api_answers(url, headers, timeout=min(5.0, max(1.0, deadline - time.monotonic()))):
            return
        if proc is not None and proc.poll() is not None:
            raise HeadExited(f"{what} exited (code {proc.returncode}) before its Jobs API answered{log_hint}",
                             cloud=cloud)
        now = time.monotonic()
        if now >= deadline:
            raise ProvisionError(f"{what} did not answer at {url} within {timeout:.0f} s{log_hint}", cloud=cloud)
        if progress is not None and now - said >= PROGRESS_EVERY_S:
            said = now
            progress(f"waiting for {what} to answer at {url}: {now - start:.0f} s of up to {timeout:.0f} s{log_hint}")
        time.sleep(0.25)
