"""pytest fixtures and helpers for tests that run dlrun against emulated VMs.

    from tests.support.vm.fixtures import vm_lab  # noqa: F401  (fixture)

The `vm_lab` fixture skips, saying why, where the lab cannot run: it needs root (namespaces, a bridge,
mounts), Debian's openssh-client, iproute2 and util-linux, and mmdebstrap while the image cache lacks
the lab's Debian root (rootfs.py). At teardown it closes the lab and fails the test if anything of it is
left. `write_mirrors` points a $DLRUN_HOME's config.yaml at the lab's package mirrors, as a user of an
air-gapped cluster would (dlrun's documented `mirrors:` setting).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .lab import VmLab
from .rootfs import mmdebstrap_problem, stock_inputs_cached

APT_PACKAGES = "openssh-client iproute2 util-linux mount e2fsprogs mmdebstrap"
TOOLS = ("ssh", "ssh-keygen", "ip", "unshare", "nsenter", "setpriv", "mount", "mkfs.ext4")


def vm_support_problem() -> str | None:
    """Why the VM lab cannot run here, or None."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if os.geteuid() != 0:  # the packages too, when they are missing: one reason says all that is lacking
        packages = f" and {', '.join(missing)}: apt-get install -y {APT_PACKAGES}" if missing else ""
        return f"the VM lab needs root (network, mount and PID namespaces, a bridge){packages}"
    if missing:
        return f"the VM lab needs {', '.join(missing)}: apt-get install -y {APT_PACKAGES}"
    if not stock_inputs_cached() and mmdebstrap_problem():
        return mmdebstrap_problem()
    if "overlay" not in Path("/proc/filesystems").read_text():
        subprocess.run(["modprobe", "overlay"], capture_output=True)
        if "overlay" not in Path("/proc/filesystems").read_text():
            return "the VM lab needs the kernel's overlay filesystem"
    return None


def lab_cache() -> dict:
    """The lab's Debian root, wheel cache and apt mirror, built / downloaded once per machine (file locks) and at most
    once per session (the session fixture `vm_lab_cache` in tests/conftest.py calls this); {"image": path,
    "wheels": path, "built": [...], "downloaded": [...]} where the last two say what this session had to
    make (with seconds), for the record. Skips the test, saying why, where the lab cannot run."""
    problem = vm_support_problem()
    if problem:
        pytest.skip(problem)
    from . import apt_mirror, package_index, rootfs

    image = rootfs.stock_root()
    try:
        apt = apt_mirror.mirror_dir()
    except (RuntimeError, OSError) as e:  # offline is a reason to skip; anything else is a failure
        if not apt_mirror.debian_reachable():
            pytest.skip(f"the VM lab's apt mirror is fetched from {apt_mirror.MIRROR} once, which is unreachable: {e}")
        raise
    try:
        wheels = package_index.wheel_dir()
    except RuntimeError as e:  # offline is a reason to skip; anything else is a failure
        if not package_index.pypi_reachable():
            pytest.skip(f"the VM lab's package index is downloaded from PyPI once, which is unreachable: {e}")
        raise
    return {"image": image, "wheels": wheels, "apt": apt, "built": rootfs.build_log,
            "downloaded": package_index.download_log + apt_mirror.fetch_log}


@pytest.fixture
def vm_lab(vm_lab_cache):  # (vm_lab_cache: tests/conftest.py)
    lab = VmLab()
    try:
        lab.open()
        yield lab
    finally:
        lab.close()
    left = lab.leftovers()
    assert left == [], f"the VM lab left {left}"


def ssh_keypair(directory: Path, name: str = "id_ed25519") -> tuple[Path, str]:
    """A fresh client key pair: (private key path, public key line)."""
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dlrun-test", "-f", str(key)],
                   check=True, capture_output=True, timeout=30)
    return key, key.with_suffix(".pub").read_text().strip()


def ssh_argv(lab: VmLab, key: Path, target: str, *args: str) -> list[str]:
    """ssh as dlrun would run it (-F lab.ssh_config), checking the VM's host key against the lab's."""
    return ["ssh", "-F", str(lab.ssh_config), "-i", str(key), "-o", "BatchMode=yes",
            "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={lab.known_hosts}", "-o", "ConnectTimeout=10", *args, target]


def write_mirrors(home: Path, lab: VmLab) -> Path:
    """$DLRUN_HOME/config.yaml with `mirrors:` naming the lab's mirrors that dlrun has a setting for
    (orchestrator.config.MIRROR_KEYS: pypi, torch, and apt once dlrun reads it); other settings already in
    the file are kept."""
    from orchestrator.config import MIRROR_KEYS

    path = Path(home) / "config.yaml"
    config = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    known = {key: url for key, url in lab.mirrors.items() if key in MIRROR_KEYS}
    config["mirrors"] = {**(config.get("mirrors") or {}), **known}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
