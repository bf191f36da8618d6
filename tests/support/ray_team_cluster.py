"""A team's Ray cluster on this machine: a real token-auth `ray start --head` and worker nodes joined with
`ray start --address`, each with its own resources (one advertising fake GPUs: `--num-gpus` plus Ray's
`accelerator_type:NAME` resource, which Ray itself sets on nodes whose GPUs it detects).

Not a fake of Ray: every process is Ray 2.60's own. What stands in: the GPUs (Ray counts what --num-gpus
says; no CUDA device exists, so a job that needs real CUDA fails here) and the network (every node on
127.0.0.1, each with its own free ports). dlrun reaches it only through the dashboard address and the
token file, as it would a team's cluster. Each node runs in its own process group, so stop_node() takes
one node away (the vanished-cluster case) without touching anyone else's Ray on this machine.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from infra.reach import RAY_NODE_PORT_FLAGS, HeadExited, free_port_flags, free_ports, wait_dashboard


@dataclass
class TeamCluster:
    address: str  # http://127.0.0.1:PORT, the dashboard / Jobs API
    gcs: str
    token_file: Path
    temp_dir: str
    env: dict
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    def add_worker(self, name: str, *, num_cpus: int, num_gpus: int = 0, resources: dict | None = None,
                   memory_gb: float = 2.0, tries: int = 3) -> None:
        """Start a worker node and wait until it has joined. A port picked free can be taken by someone
        else's connection before the raylet binds it (Ray then gives up on the node): start it again."""
        want = len(self.nodes) + 1  # every node started so far is alive (the head included)
        for attempt in range(tries):
            cmd = [*_ray(), "start", f"--address={self.gcs}", "--block", "--node-ip-address=127.0.0.1",
                   f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}", f"--memory={int(memory_gb * 2**30)}",
                   f"--resources={json.dumps(resources or {})}", *_ports()]
            self.nodes[name] = _spawn(cmd, self.env, Path(self.temp_dir) / f"{name}.log")
            try:
                self.wait_nodes(want, timeout=45.0, proc=self.nodes[name])
                return
            except TimeoutError:
                self.stop_node(name)
                if attempt == tries - 1:
                    raise

    def alive_nodes(self) -> int:
        import urllib.request

        # the state API dlrun reads (it lists a node a moment after the dashboard's own node summary does)
        req = urllib.request.Request(self.address + "/api/v0/nodes?detail=1",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                rows = json.loads(r.read())["data"]["result"]["result"]
        except Exception:
            return 0
        return sum(1 for n in rows if n.get("state") == "ALIVE")

    def wait_nodes(self, count: int, timeout: float = 90.0, proc: subprocess.Popen | None = None) -> None:
        """Until `count` nodes are alive in the dashboard's node list (TimeoutError early if proc ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_nodes() >= count:
                return
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.5)
        raise TimeoutError(f"the team cluster did not reach {count} nodes in {timeout:.0f} s")

    def stop_node(self, name: str) -> None:
        proc = self.nodes.pop(name, None)
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 8.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # Ray's children of the group may outlive the `ray start` leader by a moment
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        for name in [n for n in self.nodes if n != "head"] + ["head"]:
            self.stop_node(name)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _ray() -> list[str]:
    return [str(Path(sys.executable).parent / "ray")]


def _ports(*taken: int) -> list[str]:
    return free_port_flags((*RAY_NODE_PORT_FLAGS, "--metrics-export-port"), taken)


def _log_tail(log: Path, lines: int = 25) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _spawn(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)


def start_team_cluster(*, head_cpus: int = 1, head_gpus: int = 0, head_resources: dict | None = None,
                       timeout: float = 120.0, tries: int = 3) -> TeamCluster:
    """A token-auth head on free ports (no GPUs unless asked); add workers with add_worker().

    A port picked free can be taken by another process's connection before Ray binds it, and Ray's head then
    exits at once: such a head is started again on fresh ports; the last failure carries the head's log."""
    for attempt in range(tries):
        try:
            return _start_head(head_cpus, head_gpus, head_resources, timeout)
        except HeadExited:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def _start_head(head_cpus: int, head_gpus: int, head_resources: dict | None, timeout: float) -> TeamCluster:
    temp_dir = tempfile.mkdtemp(prefix="dlrun-team-", dir="/tmp")  # short: Ray's socket paths are limited
    token_file = Path(temp_dir) / "token"
    token_file.write_text(secrets.token_hex(32))
    token_file.chmod(0o600)
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "DLRUN_"))}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file),
               PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}")
    gcs_port, dash_port, client_port = free_ports(3)
    cluster = TeamCluster(address=f"http://127.0.0.1:{dash_port}", gcs=f"127.0.0.1:{gcs_port}",
                          token_file=token_file, temp_dir=temp_dir, env=env)
    cmd = [*_ray(), "start", "--head", "--block", "--disable-usage-stats", f"--port={gcs_port}",
           "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash_port}",
           "--include-dashboard=true", f"--temp-dir={temp_dir}", f"--num-cpus={head_cpus}", f"--num-gpus={head_gpus}",
           f"--resources={json.dumps(head_resources or {})}",
           f"--ray-client-server-port={client_port}", *_ports(gcs_port, dash_port, client_port)]
    log = Path(temp_dir) / "head.log"
    cluster.nodes["head"] = _spawn(cmd, env, log)
    try:
        wait_dashboard(cluster.address, timeout, proc=cluster.nodes["head"], what="the team's Ray head")
        cluster.wait_nodes(1, timeout, proc=cluster.nodes["head"])  # the state API lists it a moment later
    except HeadExited as exc:
        tail = _log_tail(log)  # read before stop() removes the temp dir
        cluster.stop()
        raise HeadExited(f"{exc}; its log ends:\n{tail}", cloud="local") from exc
    except BaseException:
        cluster.stop()
        raise
    return cluster
