"""The container runtime on this machine (podman preferred, else docker) and the argv that runs a command in
an image: one pure function, container_argv, for the local job now and a node's boot script later.

podman: `--device nvidia.com/gpu=all` passes the GPUs through CDI (the NVIDIA Container Toolkit's
`nvidia-ctk cdi generate`; podman docs, "GPU support"); docker: `--gpus all` (the toolkit's runtime hook).
Both: `--network host` (the job reaches the host's Ray head on 127.0.0.1), `--ipc host` (PyTorch's
DataLoader workers share memory through /dev/shm, 64 MB by default in a container), `--pull always|missing`,
and `-e NAME` without a value, so the runtime copies the value from its own environment and no secret
lands in an argv (`ps` shows argv to every user of the machine).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

RUNTIMES = ("podman", "docker")
RUNTIME_ENV = "DLRUN_CONTAINER_RUNTIME"
PULL = {"always": "always", "if-missing": "missing"}
INFO_TIMEOUT_S = 20.0
INSTALL_HINT = "install podman (`apt-get install podman`) or docker (`apt-get install docker.io`, its daemon running)"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerRun:
    """What a job's container needs; container_argv turns it into the runtime's arguments."""

    image: str                       # fully qualified (registry/name:tag or @digest): no short-name lookup
    command: tuple[str, ...]
    env_names: tuple[str, ...] = ()  # passed by name: the value comes from the runtime's own environment
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None
    gpus: bool = False
    pull: str = "if-missing"         # the job file's image_pull
    user: str | None = None          # uid:gid (docker; rootless podman maps the caller already)
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


def container_argv(runtime: str, run: ContainerRun) -> list[str]:
    """The argv that runs run.command in run.image with `runtime` (podman | docker, or a path to one)."""
    flavour = "docker" if os.path.basename(runtime).startswith("docker") else "podman"
    argv = [runtime, "run", "--rm", "--network", "host", "--ipc", "host", "--pull", PULL[run.pull]]
    if run.name:
        argv += ["--name", run.name]
    for key, value in sorted(run.labels.items()):
        argv += ["--label", f"{key}={value}"]
    if run.gpus:
        argv += ["--device", "nvidia.com/gpu=all"] if flavour == "podman" else ["--gpus", "all"]
    if run.user and flavour == "docker":
        argv += ["--user", run.user]
    for m in run.mounts:
        argv += ["-v", f"{m.source}:{m.target}{':ro' if m.read_only else ''}"]
    if run.workdir:
        argv += ["-w", run.workdir]
    for name in run.env_names:
        argv += ["-e", name]
    return argv + [run.image, *run.command]


@dataclass(frozen=True)
class Runtime:
    path: str | None   # the working runtime's executable, None when none works
    problem: str = ""  # why none works (for the one line), "" when one does

    @property
    def name(self) -> str:
        return os.path.basename(self.path) if self.path else ""


def _works(path: str) -> str:
    """"" when `<runtime> info` answers, else why not."""
    try:
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=INFO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"`{os.path.basename(path)} info` did not answer in {INFO_TIMEOUT_S:.0f} s"
    except OSError as e:
        return f"{path} cannot run ({e.strerror})"
    if proc.returncode == 0:
        return ""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
    return f"`{os.path.basename(path)} info` failed: {lines[-1][:160] if lines else f'exit {proc.returncode}'}"


def find_runtime() -> Runtime:
    """The runtime a local job's image runs with: DLRUN_CONTAINER_RUNTIME (a name or a path) if set, else
    podman if it works, else docker if it works (its daemon answers)."""
    wanted = os.environ.get(RUNTIME_ENV, "").strip()
    candidates = [wanted] if wanted else list(RUNTIMES)
    problems = []
    for name in candidates:
        path = shutil.which(name)
        if path is None:
            problems.append(f"{name} is not installed" if not wanted else f"{RUNTIME_ENV}={name} is not found")
            continue
        why = _works(path)
        if not why:
            return Runtime(path)
        problems.append(why)
    return Runtime(None, "; ".join(problems))


def has_image(runtime: str, image: str) -> bool:
    """Whether the runtime's store already holds `image` (then `--pull missing` pulls nothing)."""
    argv = [runtime, "image", "inspect", image]
    try:
        return subprocess.run(argv, capture_output=True, timeout=INFO_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
