"""Emulated VMs behind the fake clouds: each instance that moto's EC2 or FakeGce reports RUNNING gets a
"VM" on this machine (network, mount, PID and UTS namespaces, a real sshd, its boot script run as
cloud-init would), killed when the cloud terminates the instance. See lab.py; fixtures in fixtures.py."""
from .lab import VmLab
from .machine import Vm, VmBootError, VmSpec

__all__ = ["Vm", "VmBootError", "VmLab", "VmSpec"]
