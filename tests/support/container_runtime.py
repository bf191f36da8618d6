"""A stand-in `podman` executable; a real container runtime where one works here, configured for this machine,
with a local image holding python3.

The stand-in reproduces what dlrun asks of podman (podman-info(1), podman-image-inspect(1), podman-run(1)):
`info` exits 0; `image inspect REF` exits 0 only for the images it was told are in its store, 125 with
"image not known" otherwise; `run ... IMAGE CMD...` records its argv (one JSON line per call in
`calls.jsonl` beside it), refuses an image reference that is not fully qualified (podman's short-name
mode "enforcing" without a TTY), and runs CMD on the host as the container would, in `-w`'s directory with
only the `-e NAME` variables (values from its own environment, as podman takes them); a CMD that is not in
the "image" (the stand-in's `missing` list, e.g. python3) exits 127 as podman does ("executable file not
found in $PATH"). It does not isolate anything (no namespaces, mounts are not applied, `--pull` is not
performed), and does not pull.

The real runtime (`real_runtime`): podman (or docker) with a containers.conf for this machine, the runtime's own
documented configuration (containers.conf(5), read from $CONTAINERS_CONF), nothing of dlrun's changed. Two settings
make a container start on a CI machine like this one (Debian 12 in a VM, root, cgroup v1):
- default_ulimits within the machine's hard limits: podman asks for nofile=1048576 (and a high nproc) and its
  runtime's setrlimit fails with EPERM where root lacks CAP_SYS_RESOURCE ("crun: setrlimit `RLIMIT_NOFILE`:
  Operation not permitted"); 4096 each is under any hard limit and more than a test command needs;
- runtime = "runc" where the cgroups are hybrid (cgroup v1 with a cgroup2 hierarchy that still holds a
  controller, hugetlb here): crun, Debian's default, refuses them ("crun: cgroups in hybrid mode not supported,
  drop all controllers from cgroupv2"); runc runs there. Without runc installed the test skips saying so.
The image (`lab_python_image`): the VM lab's stock Debian 12 root (tests/support/vm/rootfs.py: python3, no pip)
imported once per machine into the runtime's store as localhost/dlrun-lab/python:<the root's key>, as a user
imports or builds an image without a registry (this machine reaches no public one).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r'''#!{python}
import json, os, subprocess, sys
HERE = os.path.dirname(os.path.abspath(__file__))
CONF = json.load(open(os.path.join(HERE, "conf.json")))
args = sys.argv[1:]
with open(os.path.join(HERE, "calls.jsonl"), "a") as f:
    f.write(json.dumps(args) + "\n")
if args[:1] == ["info"]:
    sys.exit(0)
if args[:2] == ["image", "inspect"]:
    if args[2] in CONF["images"]:
        print("[{{}}]"); sys.exit(0)
    print(f"Error: {{args[2]}}: image not known", file=sys.stderr); sys.exit(125)
if args[:1] != ["run"]:
    print("Error: unknown command", file=sys.stderr); sys.exit(125)
takes_value = {{"--network", "--ipc", "--pull", "--name", "--label", "--device", "--gpus", "--user", "-v", "-w", "-e"}}
i, workdir, names = 1, None, []
while i < len(args) and args[i].startswith("-"):
    if args[i] in takes_value:
        if args[i] == "-w": workdir = args[i + 1]
        if args[i] == "-e": names.append(args[i + 1])
        i += 2
    else:
        i += 1
image, cmd = args[i], args[i + 1:]
first = image.split("/")[0]
if "/" not in image or not ("." in first or ":" in first or first == "localhost"):
    print(f"Error: short-name resolution enforced but cannot prompt without a TTY: {{image}}", file=sys.stderr)
    sys.exit(125)
if cmd and cmd[0] in CONF["missing"]:
    print(f"Error: crun: executable file `{{cmd[0]}}` not found in $PATH", file=sys.stderr); sys.exit(127)
env = {{n: os.environ[n] for n in names if n in os.environ}}
env["PATH"] = os.environ.get("PATH", "")
sys.exit(subprocess.run(cmd, cwd=workdir, env=env).returncode)
'''


def fake_podman(directory: Path, *, images: tuple[str, ...] = (), missing: tuple[str, ...] = ()) -> Path:
    """A `podman` stand-in in `directory` (put it on PATH); its calls land in directory/calls.jsonl."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "conf.json").write_text(json.dumps({"images": list(images), "missing": list(missing)}))
    path = directory / "podman"
    path.write_text(SCRIPT.format(python=sys.executable))
    path.chmod(0o755)
    return path


def calls(directory: Path) -> list[list[str]]:
    f = directory / "calls.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def working_runtime() -> tuple[str | None, str]:
    """(podman or docker, if one runs containers here, else None; why not)."""
    problems = []
    for name in ("podman", "docker"):
        path = shutil.which(name)
        if not path:
            problems.append(f"{name} is not installed")
            continue
        proc = subprocess.run([path, "info"], capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            return path, ""
        problems.append(f"`{name} info` fails")
    return None, "no container runtime works here (" + "; ".join(problems) + "): `apt-get install podman`"


ULIMITS = '["nofile=4096:4096", "nproc=4096:4096"]'
CGROUP_V2_IN_HYBRID = Path("/sys/fs/cgroup/unified/cgroup.controllers")  # where systemd mounts it beside v1


def hybrid_cgroup_controllers() -> list[str]:
    """The controllers a cgroup2 hierarchy beside cgroup v1 holds (crun refuses such a machine); [] otherwise."""
    if Path("/sys/fs/cgroup/cgroup.controllers").exists() or not CGROUP_V2_IN_HYBRID.exists():
        return []  # pure cgroup v2 (or no cgroup2 beside v1): crun runs
    return CGROUP_V2_IN_HYBRID.read_text().split()


def real_runtime(directory: Path) -> tuple[str | None, dict[str, str], str]:
    """(podman or docker, the environment that runs it with this machine's containers.conf, ''), or
    (None, {}, why not) when no runtime can run a container here."""
    runtime, why = working_runtime()
    if runtime is None:
        return None, {}, why
    env = dict(os.environ)
    if os.path.basename(runtime) == "podman":
        lines = ["[containers]", f"default_ulimits = {ULIMITS}"]
        hybrid = hybrid_cgroup_controllers()
        if hybrid:
            if not shutil.which("runc"):
                return None, {}, (f"crun refuses this machine's hybrid cgroups (cgroup v1, with the controllers "
                                  f"{', '.join(hybrid)} left in the cgroup2 hierarchy at {CGROUP_V2_IN_HYBRID.parent}: "
                                  "'cgroups in hybrid mode not supported') and runc, which runs there, is not "
                                  "installed: apt-get install -y runc")
            lines += ["[engine]", 'runtime = "runc"']
        directory.mkdir(parents=True, exist_ok=True)
        conf = directory / "containers.conf"
        conf.write_text("\n".join(lines) + "\n")
        env["CONTAINERS_CONF"] = str(conf)
    return runtime, env, ""


def lab_python_image(runtime: str, env: dict[str, str]) -> str:
    """localhost/dlrun-lab/python:<key>: the lab's stock root (python3 3.11, no pip) as a local image, imported once
    per machine; skips the test, saying why, where the root cannot be built (mmdebstrap, the Debian mirror)."""
    from tests.support.vm.rootfs import key_of, stock_inputs, stock_root

    ref = f"localhost/dlrun-lab/python:{key_of(stock_inputs())}"
    if subprocess.run([runtime, "image", "inspect", ref], capture_output=True, env=env, timeout=60).returncode == 0:
        return ref
    try:
        root = stock_root()
    except RuntimeError as e:  # mmdebstrap missing or failing
        pytest.skip(f"the lab's stock root (the test image's content) could not be built: {str(e)[-500:]}")
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run([runtime, "import", "-", ref], stdin=tar.stdout, capture_output=True, text=True,
                              env=env, timeout=300)
    tar.stdout.close()  # type: ignore[union-attr]
    assert tar.wait(60) == 0 and imported.returncode == 0, imported.stderr[-2000:]
    return ref
