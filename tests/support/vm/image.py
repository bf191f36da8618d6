"""The lab's VM images: a real Debian root file system (rootfs.py) and small layers over it.

A VM's root is an overlay of an image's layers (read-only, top first) under a writable upper layer of its
own (vm_init.py): nothing of the test runner (its venv, pyenv, the project checkout, the host's /usr) is
visible inside. Two images, picked per instance from the image the cloud was asked for (image_for):

- "stock" stands for Canonical's Ubuntu 22.04 cloud images (AWS: Canonical's SSM parameter; GCE:
  ubuntu-os-cloud/ubuntu-2204-lts; configs/catalog/images.csv) and for any image the lab does not know:
  rootfs.stock_root() (python3 without venv/ensurepip, no pip, nothing for ML, sshd, sudo, curl) plus
  the lab layer below. Its login user is created at boot as cloud-init (AWS: `ubuntu`) or GCE's guest
  agent (the user named in ssh-keys) create it (vmfiles.py).
- "deep-learning" stands for the clouds' GPU images (AWS "Deep Learning Base OSS Nvidia Driver GPU AMI
  (Ubuntu 22.04)": NVIDIA driver 580/595, CUDA toolkits under /usr/local/cuda-X.Y, system python3 with no
  torch (its release notes: python_location /usr/bin/python3.10, default_cuda /usr/local/cuda-13.0);
  GCE common-cu129-ubuntu-2204-nvidia-580: driver R580 + CUDA 12.9): the stock image plus DL_LAYER, which
  carries what a boot script touches of the driver and CUDA: `nvidia-smi` (the driver's userspace, in
  /usr/bin as the driver packages install it) and /usr/local/cuda-13.0 (+ the /usr/local/cuda link) with
  its version.json. No GPU exists here, so the lab's nvidia-smi answers as the real one does on a machine
  whose driver finds no device (the kernel module is not loaded): "NVIDIA-SMI has failed because it
  couldn't communicate with the NVIDIA driver. ..." and exit status 9 (nvidia-smi(1), RETURN VALUE: 9 =
  "NVIDIA driver is not loaded"). So every GPU offer's boot fails its GPU check there, as it must.
  Not reproduced: the driver's libraries (libcuda, NVML), CUDA's libraries and compilers, cuDNN, NCCL,
  EFA, Docker; the clouds' system python packages (DLAMI's boto3, GCE's jupyter); python3-pip (the GCE
  images have it; the lab does not count on it, neither may dlrun's boot).
- The lab layer (LAB_LAYER, on top of both): the VM's own `shutdown`, `poweroff`, `halt`, `reboot` and
  `systemctl` in /usr/local/sbin, first on the PATH, which ask the VM's init to power off (power.py); and an
  admin config for podman, which neither image has (stock Debian/Ubuntu images ship no container runtime:
  a boot installs podman from the distro's mirror, apt_mirror.py): CONTAINERS_CONF, a containers.conf.d
  drop-in (read by podman >= 4 after /etc/containers/containers.conf) with `cgroups = "disabled"`, an
  emulation limit of this host, not of a real VM (see its text and vm_init.CGROUP_NOTE). With it Debian 12's
  stock podman 4.3.1 with its default runtime crun runs containers in a VM, no flag needed; without it every
  `podman run` fails there. Nothing else of podman's is in the image: no runc, no storage.conf (the VM's
  /var/lib/containers is on its ext4 disk, where podman's default overlay driver works: vm_init.py).
  Where the lab's podman differs from a real VM's (emulation limits of this host): resource limits
  (`--memory`, `--cpus`, `--pids-limit`) are accepted and not enforced (no cgroups); `--cgroups=enabled`
  fails ("cgroup.subtree_control: Read-only file system"); `--ulimit` above this host's hard limits
  (RLIMIT_NOFILE 20000, RLIMIT_MEMLOCK 8 MiB here) fails ("setrlimit `RLIMIT_NOFILE`: Operation not
  permitted") where a real VM's root raises them; no /dev/fuse, no GPU devices. For a non-root user's
  (rootless) podman the layer puts ROOTLESS_CONF in /etc/skel (so `useradd -m` gives it to a new user, as
  Debian's useradd copies /etc/skel): `cgroups = "enabled"`, podman's default, read after the drop-in: rootless
  crun leaves a container without a cgroup of its own where it may not make one (the VM's read-only
  /sys/fs/cgroup), so the default works there, and `--pid=host` (which Ray's image_uri passes) needs it:
  with cgroups disabled podman refuses it ("containers not creating Cgroups must create a private PID
  namespace"). Rootless podman's other needs are the VM's (vm_init.ROOTLESS_NOTE).

The layers are written into the lab's directory at VmLab.open (milliseconds); the Debian root is cached
(rootfs.py), so a test session builds it at most once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .power import install_commands as install_power_commands
from .rootfs import stock_root

STOCK, DEEP_LEARNING = "stock", "deep-learning"
# what the stock image's own files take of its root volume: the lab's Debian root takes ~0.3 GB outside the
# VM's disk, a stock Ubuntu 22.04 cloud image roughly 2 GB of it, so a VM's disk is its volume less this
IMAGE_USED_GB = 2.0
NVIDIA_DRIVER = "580.105.08"  # the DLAMI's driver in its 2026-01 release notes (configs/catalog/images.csv: branch 580)
CUDA = "13.0"
NVIDIA_SMI = """#!/bin/sh
# The lab's stand-in for the NVIDIA driver's nvidia-smi (tests/support/vm/image.py): this machine has no GPU,
# so the driver's kernel module is not loaded and nvidia-smi fails as it does then (exit 9).
# driver %(driver)s, whatever the options
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
echo
exit 9
"""

# the lab's admin config for podman (a drop-in, beside whatever containers.conf a boot writes)
CONTAINERS_CONF = "etc/containers/containers.conf.d/50-dlrun-lab.conf"
CONTAINERS_CONF_TEXT = """# The emulated-VM lab's admin config (tests/support/vm/image.py), not a real VM's: this host's
# sandbox refuses the eBPF device filter a container's cgroup v2 needs (crun: "setrlimit (RLIM_MEMLOCK):
# Operation not permitted") and the VM's /sys/fs/cgroup is read-only (vm_init.py), so containers run
# without cgroups of their own. A real Debian 12 / Ubuntu 22.04 VM runs podman's defaults.
[containers]
cgroups = "disabled"
"""

# a rootless user's podman config, copied into each new home by `useradd -m` (see the docstring)
ROOTLESS_CONF = "etc/skel/.config/containers/containers.conf"
ROOTLESS_CONF_TEXT = """# The emulated-VM lab's (tests/support/vm/image.py), not a real VM's: podman's default back
# for a rootless user, over the lab's drop-in that disables cgroups for root's podman (rootless crun runs a
# container without a cgroup where it may not make one; `--pid=host` needs cgroups not disabled).
[containers]
cgroups = "enabled"
"""


@dataclass(frozen=True)
class Image:
    name: str
    layers: tuple[str, ...]  # overlay lower directories, top first

    def spec(self) -> dict:
        return {"name": self.name, "layers": list(self.layers)}

    def read(self, path: str) -> str:
        """A text file of the image (its top-most layer that has it), e.g. /etc/passwd."""
        for layer in self.layers:
            candidate = Path(layer) / path.lstrip("/")
            if candidate.exists():
                return candidate.read_text()
        raise FileNotFoundError(f"{path} is in no layer of the {self.name} image")


def write_lab_layer(dest: Path) -> Path:
    install_power_commands(dest / "usr/local/sbin")  # shutdown, poweroff, halt, ...: see power.py
    conf = dest / CONTAINERS_CONF
    conf.parent.mkdir(parents=True)
    conf.write_text(CONTAINERS_CONF_TEXT)
    rootless = dest / ROOTLESS_CONF
    rootless.parent.mkdir(parents=True)
    rootless.write_text(ROOTLESS_CONF_TEXT)
    return dest


def write_dl_layer(dest: Path) -> Path:
    smi = dest / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text(NVIDIA_SMI % {"driver": NVIDIA_DRIVER})
    smi.chmod(0o755)
    cuda = dest / f"usr/local/cuda-{CUDA}"
    cuda.mkdir(parents=True)
    (cuda / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": f"{CUDA}.2"}}) + "\n")
    (dest / "usr/local/cuda").symlink_to(f"cuda-{CUDA}")
    return dest


def build_images(dest: Path) -> dict[str, Image]:
    """The lab's images, their small layers written under `dest` (the Debian root comes from the cache)."""
    base = str(stock_root())
    lab = str(write_lab_layer(dest / "lab-layer"))
    dl = str(write_dl_layer(dest / "dl-layer"))
    return {STOCK: Image(STOCK, (lab, base)), DEEP_LEARNING: Image(DEEP_LEARNING, (lab, dl, base))}


def image_for(cloud_image: str) -> str:
    """The lab image for what the instance was launched from (an AMI's name and description, a GCE
    source image URL, or a lab image's own name): the deep-learning image for the clouds' deep-learning
    images, else stock."""
    text = cloud_image.lower().replace("-", " ").replace("_", " ")
    return DEEP_LEARNING if ("deep learning" in text or "deeplearning" in text) else STOCK
