"""Reaching a Ray head: free local ports, whether its dashboard answers, waiting until it does."""
from __future__ import annotations

import json
import socket
import subprocess
import time
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


def wait_dashboard(url: str, timeout: float, proc: subprocess.Popen | None = None, *,
                   what: str = "the Ray head", log_hint: str = "", cloud: str = "local") -> None:
    """Until the dashboard at url answers; ProvisionError when proc exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dashboard_alive(url, timeout=1.0):
            return
        if proc is not None and proc.poll() is not None:
            raise ProvisionError(f"{what} exited (code {proc.returncode}){log_hint}", cloud=cloud)
        time.sleep(0.25)
    raise ProvisionError(f"{what} did not answer at {url} within {timeout:.0f} s{log_hint}", cloud=cloud)
