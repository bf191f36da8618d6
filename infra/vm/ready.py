"""Is a fresh cluster ready for a job? SSH answers, every node's boot script finished, Ray on the head
sees every node with its GPUs. A boot that failed or never finished is one ProvisionError carrying the
last lines of that node's boot log, so the executor tears the cluster down and tries the next offer.
"""
from __future__ import annotations

import base64
import json
import os
import time
import urllib.request

from infra.base import Cluster, Node, ProvisionError
from infra.vm import ssh
from infra.vm.bootstrap import HEARTBEAT_FILE, NODE_DIR, TOKEN_FILE
from infra.vm.container_boot import AUTH_FILE

BOOT_TIMEOUT_ENV = "DLRUN_BOOT_TIMEOUT"   # seconds a node may take to install and start Ray (default 900)
JOIN_TIMEOUT_S = 300.0
LOG_LINES = 12


def boot_timeout_s() -> float:
    return float(os.environ.get(BOOT_TIMEOUT_ENV, 900))


def _boot_state(cluster: Cluster, node: Node) -> tuple[str, str]:
    """("ready" | "failed" | "booting", detail) from the node's markers, read over SSH."""
    code, out = ssh.run(cluster, f"if [ -e {NODE_DIR}/ready ]; then echo READY; "
                                 f"elif [ -e {NODE_DIR}/failed ]; then echo FAILED; cat {NODE_DIR}/failed; "
                                 f"else echo BOOTING; fi", node, timeout=30)
    if code != 0:
        return "booting", out  # a blip while the node is busy installing: ask again
    first, _, rest = out.partition("\n")
    return {"READY": "ready", "FAILED": "failed"}.get(first.strip(), "booting"), rest.strip()


def heartbeat(cluster: Cluster) -> None:
    """Tell every node's watchdog that dlrun still watches (a node that misses it powers off)."""
    for node in cluster.nodes:
        ssh.run(cluster, f"touch ~/{HEARTBEAT_FILE}", node, timeout=20)


def boot_log_tail(cluster: Cluster, node: Node, lines: int = LOG_LINES) -> str:
    code, out = ssh.run(cluster, f"tail -n {int(lines)} {NODE_DIR}/boot.log 2>/dev/null", node, timeout=30)
    return out if code == 0 and out else "(no boot log)"


def registry_auth(cluster: Cluster) -> str | None:
    """The containers auth file (containers-auth.json(5)) for the cluster's image registry, from the credentials
    this machine has for it (infra/images/credentials.py); None without an image or a credential."""
    image = cluster.extra.get("container_image")
    if not image:
        return None
    from infra.images.credentials import CredentialsProblem, credential_for
    from infra.images.reference import parse_reference

    ref = parse_reference(image)
    try:
        cred = credential_for(ref.registry, ref.repository)
    except CredentialsProblem as e:
        raise ProvisionError(f"registry credentials for {ref}: {e}", cloud=cluster.provider) from None
    if cred is None:
        return None
    auth = {"auth": base64.b64encode(f"{cred.username}:{cred.password}".encode()).decode()}
    # podman looks Docker Hub up as docker.io, docker as its v1 index URL
    keys = [ref.registry, "https://index.docker.io/v1/"] if ref.registry == "docker.io" else [ref.registry]
    return json.dumps({"auths": {key: auth for key in keys}})


def _write_secret(cluster: Cluster, node: Node, name: str, content: str, what: str, then: str = "") -> None:
    """`content` into ~/NAME on the node (0600, whole or not at all), over SSH's stdin: never in an argv."""
    code, out = ssh.run(cluster, f"umask 077 && cat > ~/{name}.tmp && mv ~/{name}.tmp ~/{name}{then}", node,
                        timeout=30, stdin=content)
    if code != 0:
        raise ProvisionError(f"could not hand {what} to {node.node_id}: {out[-200:]}", cloud=cluster.provider)


def hand_over_token(cluster: Cluster, node: Node, token: str, registry_auth: str | None = None) -> None:
    """Write the cluster's Ray token into the login user's home on the node (0600), over SSH: the boot
    script moves it to the node directory and only then starts Ray. The registry credentials for the job's
    image (an auth file) go first: the token's arrival is what the boot waits for."""
    if registry_auth:
        _write_secret(cluster, node, AUTH_FILE, registry_auth, "the registry credentials")
    _write_secret(cluster, node, TOKEN_FILE, token, "the Ray token", then=f" && touch ~/{HEARTBEAT_FILE}")


def wait_booted(cluster: Cluster, *, token: str | None = None, timeout_s: float | None = None,
                poll_s: float = 3.0, sleep=time.sleep, registry_auth: str | None = None) -> None:
    """Until every node wrote its ready marker; ProvisionError with the boot log when one failed.
    Each node gets the cluster's Ray token as soon as it accepts SSH."""
    timeout_s = boot_timeout_s() if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    waiting = list(cluster.nodes)
    for node in waiting:
        ssh.wait_for_ssh(cluster, node, timeout_s=max(1.0, deadline - time.monotonic()), sleep=sleep)
        if token:
            hand_over_token(cluster, node, token, registry_auth)
    while waiting:
        for node in list(waiting):
            state, detail = _boot_state(cluster, node)
            if state == "ready":
                waiting.remove(node)
            elif state == "failed":
                raise ProvisionError(f"{node.node_id} failed to boot ({detail}); last lines of its boot log:\n"
                                     f"{boot_log_tail(cluster, node)}", cloud=cluster.provider)
        if waiting and time.monotonic() > deadline:
            node = waiting[0]
            raise ProvisionError(f"{node.node_id} did not finish booting within {timeout_s:.0f}s; last lines "
                                 f"of its boot log:\n{boot_log_tail(cluster, node)}", cloud=cluster.provider)
        if waiting:
            sleep(poll_s)


def alive_nodes(dashboard: str, headers: dict | None = None) -> list[dict]:
    """The nodes Ray's state API reports ALIVE on a head (each with resources_total)."""
    req = urllib.request.Request(f"{dashboard}/api/v0/nodes?limit=1000", headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = json.loads(resp.read())
    data = body.get("data", {}).get("result", {})
    rows = data.get("result", []) if isinstance(data, dict) else data
    return [n for n in rows if n.get("state") == "ALIVE"]


def wait_joined(cluster: Cluster, dashboard: str, *, gpus_per_node: int = 0, timeout_s: float = JOIN_TIMEOUT_S,
                poll_s: float = 2.0, headers: dict | None = None, sleep=time.sleep) -> list[dict]:
    """Until Ray sees every node of the cluster, each with its GPUs: a job submitted earlier would run
    with fewer workers, or on CPU (Ray Train decides use_gpu from what has joined)."""
    want = len(cluster.nodes)
    deadline, seen = time.monotonic() + timeout_s, []
    while True:
        try:
            seen = alive_nodes(dashboard, headers)
        except (OSError, ValueError):
            seen = []
        full = [n for n in seen if float((n.get("resources_total") or {}).get("GPU", 0)) >= gpus_per_node]
        if len(full) >= want:
            return seen
        if time.monotonic() > deadline:
            raise ProvisionError(f"only {len(full)} of {want} nodes joined the Ray cluster "
                                 f"{cluster.cluster_id} with {gpus_per_node} GPU(s) each within {timeout_s:.0f}s",
                                 cloud=cluster.provider)
        sleep(poll_s)
