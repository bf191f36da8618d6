"""Emulated VMs behind the fake clouds: each instance that moto's EC2 or FakeGce reports RUNNING gets a
"VM" on this machine (network, mount, PID and UTS namespaces, a real Debian root file system as its image,
the image's own sshd, its boot script run as cloud-init would, packages only from the lab's index and Debian
mirror, images from the lab's OCI registries), killed when the cloud terminates the instance. See lab.py
(image.py, rootfs.py, package_index.py, apt_mirror.py, oci_images.py, registry.py); fixtures in fixtures.py;
bench/vm_boot.py for boot-to-ready."""
from .lab import VmLab
from .machine import Vm, VmBootError, VmSpec

__all__ = ["Vm", "VmBootError", "VmLab", "VmSpec"]
