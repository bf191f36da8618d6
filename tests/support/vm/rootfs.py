"""The lab's base root file system: a real Debian 12 made by `mmdebstrap`, built once and cached.

What it stands for: the stock Ubuntu 22.04 cloud images dlrun boots CPU offers on (Canonical's AMI on
AWS, `ubuntu-2204-lts` on GCE; configs/catalog/images.csv). It reproduces what matters to a boot script:
- Debian's own packages (from deb.debian.org, `--variant=minbase`: the Essential and Priority: required
  packages and apt) plus python3, ca-certificates, iproute2, procps, curl, sudo and openssh-server (every
  cloud image runs an sshd). python3 is Debian's 3.11 **without** `ensurepip`/`venv` (Debian and Ubuntu
  split them into python3-venv / python3.X-venv), no pip, nothing for ML: `python3 -m venv` fails exactly
  as on Canonical's images (packages.debian.org/bookworm/python3.11 vs python3.11-venv).
- apt's sources point at deb.debian.org and the package lists are empty (mmdebstrap cleans them, as cloud
  image builds do): `apt-get install` needs `apt-get update`, which a lab VM cannot reach.
- No SSH host keys (cloud images make them at first boot: the lab gives each VM its own) and no
  /etc/resolv.conf (the VM has no resolver: a name lookup fails at once instead of waiting on a DNS
  server off the lab's bridge; a real air-gapped VPC resolves names but then times out connecting).
What it does not reproduce: Ubuntu itself (22.04 has python3.10, these are Debian 12's 3.11 and glibc
2.36), cloud-init, systemd as PID 1 and its units (the lab's vm_init.py stands in), snapd, and
unattended-upgrades holding the dpkg lock at first boot.

Cache: $DLRUN_LAB_CACHE, else $XDG_CACHE_HOME/dlrun-lab, else ~/.cache/dlrun-lab (outside the repo, shared
by every checkout on the machine). Each root lives in images/<name>-<key>/root, with build.json beside
it once complete; the key hashes the build inputs (suite, variant, packages, mirror, the hook, RECIPE); a flock on images/.lock makes concurrent
test processes build it once. Built into a temporary directory and renamed into place when complete.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

RECIPE = 1  # bump when the build below changes in a way the inputs do not show
SUITE = "bookworm"
VARIANT = "minbase"
MIRROR = "http://deb.debian.org/debian"
STOCK_PACKAGES = ("python3", "ca-certificates", "iproute2", "procps", "curl", "sudo", "openssh-server")
# what a cloud image build leaves out (see the docstring); $1 is the new root
CUSTOMIZE = ('rm -f "$1"/etc/ssh/ssh_host_* "$1"/etc/resolv.conf; echo localhost > "$1"/etc/hostname; '
             'rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*_Packages')
BUILD_TIMEOUT_S = 900

build_log: list[dict] = []  # what this process built (name, seconds): for the bench and reports


def cache_dir() -> Path:
    explicit = os.environ.get("DLRUN_LAB_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dlrun-lab"


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive flock on `path` (created if missing), held for the block: one builder at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def key_of(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def stock_inputs() -> dict:
    return {"suite": SUITE, "variant": VARIANT, "include": list(STOCK_PACKAGES), "mirror": MIRROR,
            "customize": CUSTOMIZE, "recipe": RECIPE}


def mmdebstrap_problem() -> str | None:
    if not shutil.which("mmdebstrap"):
        return "the VM lab builds its images with mmdebstrap: apt-get install -y mmdebstrap"
    return None


def stock_inputs_cached() -> bool:
    return (cache_dir() / "images" / f"stock-{key_of(stock_inputs())}" / "build.json").exists()


def stock_root() -> Path:
    """The stock root file system (a directory), built now if the cache lacks it."""
    inputs = stock_inputs()
    images = cache_dir() / "images"
    home = images / f"stock-{key_of(inputs)}"
    root = home / "root"
    if (home / "build.json").exists():
        return root
    with locked(images / ".lock"):
        if (home / "build.json").exists():  # another process built it while we waited
            return root
        problem = mmdebstrap_problem()
        if problem:
            raise RuntimeError(problem)
        for stale in images.glob(f".building-{home.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a build killed halfway (we hold the lock)
        shutil.rmtree(home, ignore_errors=True)
        tmp = images / f".building-{home.name}-{os.getpid()}"
        started = time.monotonic()
        argv = ["mmdebstrap", f"--variant={VARIANT}", f"--include={','.join(STOCK_PACKAGES)}",
                f"--customize-hook={CUSTOMIZE}", SUITE, str(tmp), MIRROR]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"mmdebstrap failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        seconds = time.monotonic() - started
        home.mkdir(parents=True)
        tmp.rename(root)
        (home / "build.json").write_text(json.dumps({"inputs": inputs, "seconds": round(seconds, 1),
                                                     "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        build_log.append({"name": "stock", "seconds": seconds, "path": str(root)})
        return root
