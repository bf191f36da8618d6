"""TeamRayCluster: a team's own Ray cluster in the VM lab, reached only through its address and token.

    cluster = TeamRayCluster(lab).start()   # three VMs: head, a CPU worker, a worker with (fake) GPUs
    cluster.address                         # http://<head's lab address>:8265: dashboard and Jobs API
    cluster.token_file                      # a file on this machine holding the cluster's token
    cluster.vanish()                        # the head VM dies: the whole cluster is gone mid-run
    cluster.close()

It stands for the shared cluster a team already runs (on-premises GPU boxes, or a hosted one), set up
the way such a team sets one up, not the way dlrun boots its own (infra/vm/bootstrap.py): each VM's
start-up script (EC2-style user data, run once by the lab's cloud-init) fetches uv from the lab's PyPI
mirror with the image's python3 (infra/vm/get_uv.py: Debian's stock root has no pip and no venv), makes a
venv, installs Ray with the dashboard and torch's CPU wheel from the lab's mirrors, writes the cluster's
token and runs `ray start` with RAY_AUTH_MODE=token: the head with its dashboard on 0.0.0.0 (the team's
users reach it directly, no SSH tunnel), the workers joining HEAD:6379 with the same token.

What it reproduces (Ray 2.60, ray/_private/authentication/http_token_authentication.py and
ray/_private/resource_and_label_spec.py):
- token authentication on every dashboard / Jobs API route but the few Ray leaves open (/api/version,
  health checks): no token is 401, a wrong one 403; nodes join only with the token (gRPC interceptors);
- a multi-node cluster whose nodes have distinct resources: the head `--num-cpus 1` and no GPU, worker 1
  CPUs only, worker 2 `--num-gpus 2` plus the custom resource `accelerator_type:A100` = 1, which is what
  Ray itself puts on a node whose GPUs it detects as A100s (one unit per node, whatever its GPU count:
  a job asks for a fraction of it, as Ray's `accelerator_type=` option does with 0.001). Jobs placed with
  `entrypoint_num_gpus` / `entrypoint_resources` land on that worker;
- the cluster vanishing: the head VM is killed (every process at once, its address unreachable), as when
  the team's head machine dies or its admins tear it down.
With `containers=True` (or a tuple of roles) its nodes are also set up for Ray's image_uri runtime env (a
job's `image:` on a team cluster, orchestrator/runs/entrypoint.py), as a team's admins must set them up for it
(CONTAINERS_SCRIPT; the other roles run Ray as root without podman, as a node the admins have not set up yet):
- podman on each such node, from the distro's mirror (the lab's Debian mirror, `lab.mirrors["apt"]`, as the
  node's only apt source), with its Recommends: uidmap (newuidmap/newgidmap), slirp4netns, fuse-overlayfs.
  Ray's docs: "the image_uri field ... requires podman to be installed on the cluster's nodes", and the
  image must hold the cluster's Ray and Python versions (docs.ray.io, handling-dependencies.html,
  "Specifying container images");
- Ray run as a non-root user (RAY_USER, `useradd -m`: Debian's useradd gives it a subordinate uid/gid range
  in /etc/subuid and /etc/subgid, login.defs SUB_UID_COUNT 65536) with rootless podman: Ray 2.60's image_uri
  plugin (ray/_private/runtime_env/image_uri.py) starts each worker with `podman run -v /tmp/ray:/tmp/ray
  --cgroup-manager=cgroupfs --network=host --pid=host --ipc=host --userns=keep-id ... --entrypoint python
  IMAGE`, and `--userns=keep-id` is refused by a root podman ("keep-id is only supported in rootless mode").
  The cluster's token file is that user's (the plugin mounts it into the container);
- the team's registry, having no TLS, marked insecure in the node's registries.conf (registries.conf(5):
  `[[registry]] location = ... insecure = true`): the plugin's `podman run` has no --tls-verify;
- storage.conf's driver `overlay` (what Debian's containers-storage package ships as the default; Debian's
  podman 4.3 alone, without a storage.conf, gives a rootless user the vfs driver, which copies every layer
  whole: podman's rootless tutorial, docs/tutorials/rootless_tutorial.md, "storage.conf").
The lab's part (the VM's /dev/mqueue, /dev/net/tun, shared /, /home on the VM's disk: vm_init.ROOTLESS_NOTE;
podman's default cgroups for a rootless user: image.py) is what a real VM has without its admins.
What it does not: real GPUs or CUDA (worker 2's torch is the CPU build; Ray sets CUDA_VISIBLE_DEVICES for
a job holding a GPU, nothing more), the node label `ray.io/accelerator-type` Ray adds beside the resource
(`ray start` refuses user labels under ray.io/), KubeRay / Kubernetes, TLS, autoscaling, per-node memory
(every VM sees this machine's memory and CPUs: the CPU counts are what `ray start` is told). The token is
in the start-up script here; a real team distributes it through its own secret store.
"""
from __future__ import annotations

import json
import os
import secrets
import shlex
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from infra.vm.bootstrap import GET_UV, UV_VERSION, UV_WHEELS

from . import net
from .lab import VmLab
from .machine import Vm, VmSpec
from .package_index import requirements

RAY_PORT, DASHBOARD_PORT = 6379, 8265
NODE_DIR = "/opt/team-ray"
OBJECT_STORE_BYTES = 200 * 2**20  # three Ray nodes share this machine's memory
FAILED = "team-ray boot failed:"  # the start-up script's last console line when it fails
INSTALLED = "team-ray installed in"  # + the seconds from the script's start to Ray and torch in the venv


@dataclass(frozen=True)
class NodeRole:
    name: str  # instance id suffix and host name suffix
    host: int  # last octet of its private IP
    start_args: str  # `ray start` options after the address ones


HEAD = NodeRole("head", 2, "--num-cpus=1 --num-gpus=0")
CPU_WORKER = NodeRole("cpu", 3, "--num-cpus=2 --num-gpus=0")
GPU_WORKER = NodeRole("gpu", 4, "--num-cpus=2 --num-gpus=2 --resources='{\"accelerator_type:A100\": 1}'")
ROLES = (HEAD, CPU_WORKER, GPU_WORKER)

SCRIPT = r"""#!/bin/bash
# a team's Ray node (%(role)s): uv from the PyPI mirror, a venv with Ray and torch, then `ray start`
set -euo pipefail
trap 'echo "%(failed)s line $LINENO: $BASH_COMMAND exited with $?"' ERR
export HOME=/root RAY_USAGE_STATS_ENABLED=0 UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1 NO_COLOR=1
D=%(node_dir)s
mkdir -p "$D/bin" && chmod 700 "$D"
export UV_CACHE_DIR="$D/uv-cache"
umask 077 && printf '%%s' %(token)s > "$D/token" && umask 022
%(containers)spython3 - %(pypi)s "$D/bin" "$(uname -m)" %(uv_version)s %(uv_pins)s <<'TEAM_GET_UV'
%(get_uv)sTEAM_GET_UV
"$D/bin/uv" venv --python python3 "$D/venv"
# torch from the torch mirror (its CPU index), everything else from the PyPI mirror
"$D/bin/uv" pip install --python "$D/venv/bin/python" --index-url %(pypi)s \
  --extra-index-url %(torch_index)s %(ray)s %(torch)s
%(wait_podman)secho "%(installed)s $SECONDS s"
export PATH="$D/venv/bin:$PATH" RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$D/token"
%(start)s
"""

RAY_USER = "ray"  # with containers=True: the non-root user Ray runs as (rootless podman, for image_uri)
# with containers=True, as root before the venv: podman for Ray's image_uri, installed beside the venv (waited
# for before `ray start`), and the user Ray runs as (see the docstring)
CONTAINERS_SCRIPT = r"""echo "deb %(apt)s bookworm main" > /etc/apt/sources.list  # the team's mirror, apt's only source
(apt-get -q update && DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman) > /var/log/team-podman.log 2>&1 &
PODMAN=$!
useradd -m -s /bin/bash %(user)s
chmod 755 "$D" && chown %(user)s "$D/token"
mkdir -p /etc/containers/registries.conf.d
printf '[[registry]]\nlocation = "%%s"\ninsecure = true\n' %(registry)s > /etc/containers/registries.conf.d/50-team.conf
printf '[storage]\ndriver = "overlay"\n' > /etc/containers/storage.conf
"""
WAIT_PODMAN = r"""wait $PODMAN || { tail -20 /var/log/team-podman.log; false; }
"""


def _pins() -> tuple[str, str]:
    """The lab index's Ray (with only the dashboard's extra: a team installs ray[default]) and torch."""
    found = {Requirement(r).name: Requirement(r) for r in requirements()}
    ray, torch = found["ray"], found["torch"]
    return f"ray[default]{ray.specifier}", f"torch{torch.specifier}"


class TeamRayCluster:
    def __init__(self, lab: VmLab, *, name: str = "team", subnet: str = "10.77.0",
                 containers: bool | tuple[NodeRole, ...] = False):
        """`subnet`: the first three octets of the VMs' private IPs (head .2, CPU worker .3, GPU worker .4);
        `containers`: the nodes set up for Ray's image_uri (podman, Ray as RAY_USER: see the class docstring),
        True for all; the others run Ray as root without podman, as a node the admins have not set up yet."""
        self.lab, self.name, self.subnet = lab, name, subnet
        self.containers = ROLES if containers is True else tuple(containers or ())
        self.token = secrets.token_hex(32)
        self.token_file = lab.dir / f"{name}-ray-token"
        self.vms: dict[str, Vm] = {}  # role name -> VM
        self._vanished: list[str] = []  # the vanished head's addresses, held on the bridge (vanish)
        # seconds from start(): "boot" (the VMs booted), "install" (the slowest node's uv, venv, Ray and
        # torch, from its boot), "cluster" (the Jobs API shows the 3 nodes alive)
        self.timings: dict[str, float] = {}

    def ip(self, role: NodeRole) -> str:
        return f"{self.subnet}.{role.host}"

    def instance_id(self, role: NodeRole) -> str:
        return f"{self.name}-{role.name}"

    @property
    def head(self) -> Vm:
        return self.vms[HEAD.name]

    @property
    def address(self) -> str:
        """The dashboard / Jobs API URL, at the head's lab address (always routed to it from here)."""
        return f"http://{self.head.address}:{DASHBOARD_PORT}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def script(self, role: NodeRole) -> str:
        ray, torch = _pins()
        q = shlex.quote
        mode = f"--head --port={RAY_PORT} --dashboard-host=0.0.0.0 --dashboard-port={DASHBOARD_PORT}" \
            if role is HEAD else f"--address={self.ip(HEAD)}:{RAY_PORT}"
        start = f"ray start {mode} --node-ip-address={self.ip(role)} {role.start_args} " \
                f"--object-store-memory={OBJECT_STORE_BYTES} --disable-usage-stats"
        if role in self.containers:  # Ray as its user, with that user's home (rootless podman keeps its images there)
            start = f"runuser -u {RAY_USER} -- env HOME=/home/{RAY_USER} USER={RAY_USER} {start}"
        if role is not HEAD:  # the head may still be installing: keep trying to join, as a team's unit would
            start = (f"for i in $(seq 1 300); do {start} && break; [ $i = 300 ] && "
                     f"{{ echo '{FAILED} could not join {self.ip(HEAD)}:{RAY_PORT}'; exit 1; }}; sleep 2; done")
        return SCRIPT % {
            "role": role.name, "failed": FAILED, "installed": INSTALLED, "node_dir": NODE_DIR, "token": q(self.token),
            "pypi": q(self.lab.mirrors["pypi"]), "torch_index": q(self.lab.mirrors["torch"] + "/cpu"),
            "uv_version": q(UV_VERSION), "get_uv": GET_UV, "ray": q(ray), "torch": q(torch), "start": start,
            "uv_pins": " ".join(q(f"{arch}={wheel}={sha}") for arch, (wheel, sha) in UV_WHEELS.items()),
            "containers": CONTAINERS_SCRIPT % {
                "apt": q(self.lab.mirrors["apt"]), "user": RAY_USER, "registry": q(self.lab.registry.host),
            } if role in self.containers else "",
            "wait_podman": WAIT_PODMAN if role in self.containers else ""}

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout_s: float = 900) -> "TeamRayCluster":
        """Boots the three VMs (their installs run side by side) and returns once the Jobs API, asked with
        the token, shows all three nodes alive; RuntimeError (with the consoles) when a boot fails or time
        runs out. The calling thread must outlive the VMs (VmLab.boot)."""
        started = time.monotonic()
        self.token_file.write_text(self.token + "\n")
        os.chmod(self.token_file, 0o600)
        try:
            for role in ROLES:
                self.vms[role.name] = self.lab.boot(VmSpec(
                    self.instance_id(role), self.ip(role), None, "ubuntu", [],
                    boot_script=self.script(role).encode(), hostname=self.instance_id(role)))
            self.timings["boot"] = time.monotonic() - started
            self._wait_for_nodes(started + timeout_s)
        except BaseException:
            self.close()
            raise
        self.timings["cluster"] = time.monotonic() - started
        self.timings["install"] = max(float(line.split()[-2]) for vm in self.vms.values()
                                      for line in vm.console_log().splitlines() if line.startswith(INSTALLED))
        return self

    def __enter__(self) -> "TeamRayCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _wait_for_nodes(self, deadline: float) -> None:
        while True:
            failed = [vm for vm in self.vms.values() if FAILED in vm.console_log()]
            if failed:
                apt = self.lab.apt.requests[-20:] if self.lab.apt else []  # what the lab's mirrors answered
                index = self.lab.index.requests[-20:] if self.lab.index else []
                raise RuntimeError(f"the team cluster's {failed[0].instance_id} failed to start:\n"
                                   f"{failed[0].console_log()[-4000:]}\nthe apt mirror's last requests: {apt}"
                                   f"\nthe package index's last requests: {index}")
            try:
                if len(self.alive_nodes()) == len(ROLES):
                    return
            except (OSError, ValueError):
                pass  # the head is still installing or starting
            if time.monotonic() > deadline:
                consoles = "\n".join(f"--- {vm.instance_id}\n{vm.console_log()[-1500:]}" for vm in self.vms.values())
                raise RuntimeError(f"the team cluster did not show {len(ROLES)} nodes alive in time:\n{consoles}")
            time.sleep(2)

    def get(self, path: str, *, headers: dict[str, str] | None = None, timeout: float = 10):
        """GET address + path (with the token unless `headers` says otherwise): (status, parsed JSON or text)."""
        request = urllib.request.Request(self.address + path, headers=self.headers if headers is None else headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                status, body = resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read().decode(errors="replace")
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def alive_nodes(self) -> list[dict]:
        """The nodes Ray's state API reports ALIVE (node_ip, node_name, resources_total, ...)."""
        status, body = self.get("/api/v0/nodes?detail=1&limit=100")
        if status != 200 or not isinstance(body, dict):
            raise ValueError(f"HTTP {status}: {body}")
        return [n for n in body["data"]["result"]["result"] if n["state"] == "ALIVE"]

    def vanish(self) -> None:
        """The head VM dies: every Ray process of the head goes, and its addresses stop answering as a host
        gone from its LAN does: ARP goes unanswered, a client gets "No route to host" after ~3 s. (Its
        routes are put back on the lab's bridge for that: without them a connection would follow this
        machine's default route, whose gateway may answer itself: a sandbox's egress filter says HTTP 403.)"""
        head = self.vms.get(HEAD.name)
        if head is None or head.instance_id not in self.lab.vms:
            return
        self.lab.kill(head.instance_id)
        for address in head.routed:  # (on the bridge: they go with it even if close() never runs)
            net.ip("route", "add", f"{address}/32", "dev", self.lab.net.bridge, "src", self.lab.net.host_ip,
                   check=False)
            self._vanished.append(address)

    def close(self) -> None:
        """Kills the cluster's VMs, frees a vanished head's addresses and removes the token file. Idempotent."""
        while self._vanished:
            net.ip("route", "del", f"{self._vanished.pop()}/32", "dev", self.lab.net.bridge, check=False)
        for role in ROLES:
            self.lab.kill(self.instance_id(role))
        self.token_file.unlink(missing_ok=True)
