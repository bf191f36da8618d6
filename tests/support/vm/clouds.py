"""Watchers that keep a lab's VMs in step with a fake cloud, and the fake clouds' console-output hooks.

Why polling threads: the fakes stay unaware of the harness (moto's server is not ours to change, and
FakeGce only grows a serial-port hook), and a 0.3 s poll is what a cloud's boot latency looks like anyway.
A watcher reports the instances that should have a VM (RUNNING) to VmLab.sync, which boots the new ones
and kills those that stopped, were terminated, deleted or preempted, or vanished. Before that, for each of
its VMs whose guest powered itself off (`shutdown -h now`, ...: see power.py), it does through the fake
cloud what the cloud does then: EC2 terminates or stops the instance per its
InstanceInitiatedShutdownBehavior, GCE stops it (TERMINATED, whatever its termination action: that
action is for preemption and maxRunDuration only), its disk kept and billed.

Console output:
- EC2: moto's GetConsoleOutput answers a fixed sample text from a response method
  (moto.ec2.responses.general.General.get_console_output); install_moto_console replaces that method,
  while any lab is open, by one that answers a lab VM's console log for the instances in _CONSOLES and
  defers to moto's for the others. This works because ThreadedMotoServer runs in the test process.
- GCE: FakeGce.serial_port_output, a callback (zone, name) -> text, serves getSerialPortOutput.
"""
from __future__ import annotations

import base64
import copy
import threading
import time
from urllib.parse import urlparse
from typing import TYPE_CHECKING, Callable

import boto3

from ..gce_metadata import FakeGceMetadata
from .machine import VmSpec
from .metadata import GceVmMetadata, VmMetadata, moto_role_credentials

if TYPE_CHECKING:
    from .lab import VmLab

EC2_ALIVE = {"running"}
GCE_ALIVE = {"RUNNING"}

_CONSOLES: dict[str, Callable[[], str]] = {}  # EC2 instance id -> its VM's console log
_MOTO_ORIGINAL: list = []
_MOTO_LOCK = threading.Lock()


def _moto_get_console_output(self):
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ec2.utils import Base64EncodedString

    instance_id = self._get_param("InstanceId")
    console = _CONSOLES.get(instance_id)
    if console is None:
        return _MOTO_ORIGINAL[0](self)
    instance = self.ec2_backend.get_instance(instance_id)  # the same errors as moto's own for bad ids
    return ActionResult({"InstanceId": instance.id, "Timestamp": utcnow(),
                         "Output": Base64EncodedString.from_raw_string(console())})


def install_moto_console(instance_id: str, console: Callable[[], str]) -> None:
    from moto.ec2.responses.general import General

    with _MOTO_LOCK:
        if not _MOTO_ORIGINAL:
            _MOTO_ORIGINAL.append(General.get_console_output)
            General.get_console_output = _moto_get_console_output
        _CONSOLES[instance_id] = console


def uninstall_moto_console(instance_ids) -> None:
    """Forgets these instances; restores moto's own method once no lab has any."""
    from moto.ec2.responses.general import General

    with _MOTO_LOCK:
        for instance_id in instance_ids:
            _CONSOLES.pop(instance_id, None)
        if not _CONSOLES and _MOTO_ORIGINAL:
            General.get_console_output = _MOTO_ORIGINAL.pop()


def moto_console_installed() -> bool:
    return bool(_MOTO_ORIGINAL)


class Watcher:
    """Polls one fake cloud from its own thread until stopped."""

    source = "cloud"

    def __init__(self, lab: "VmLab", user: str, interval_s: float):
        self.lab, self.user, self.interval_s = lab, user, interval_s
        self.poll_errors: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"vm-lab-{self.source}", daemon=True)

    def start(self) -> "Watcher":
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for vm in self.lab.powered_off(self.source):
                try:
                    vm.power_handled = self.power_off(vm)
                except Exception as e:  # tried again at the next poll
                    self.poll_errors.append(f"{vm.instance_id}: power-off: {type(e).__name__}: {e}")
                    del self.poll_errors[:-20]
            try:
                self.lab.sync(self.source, self.running())
            except Exception as e:  # a poll failing (the fake stopped first) must not kill the thread
                self.poll_errors.append(f"{type(e).__name__}: {e}")
                del self.poll_errors[:-20]
            self._stop.wait(self.interval_s)

    def running(self) -> dict[str, tuple[str, Callable[[], VmSpec]]]:
        """instance key -> (cloud id, a function that makes its VmSpec), for instances that are RUNNING."""
        raise NotImplementedError

    def power_off(self, vm) -> str:
        """What the cloud does when the guest of `vm` powered itself off; returns what it did, in words."""
        raise NotImplementedError

    def leftovers(self) -> list[str]:
        """What of this watcher is still installed, once stopped."""
        return [f"thread {self.thread.name}"] if self.thread.is_alive() else []


class Ec2Watcher(Watcher):
    def __init__(self, lab: "VmLab", endpoint_url: str, region: str, user: str = "ubuntu",
                 interval_s: float = 0.3):
        self.source = f"ec2:{endpoint_url}:{region}"
        super().__init__(lab, user, interval_s)
        self.ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint_url,
                                aws_access_key_id="testing", aws_secret_access_key="testing")
        self.endpoint_url, self.region = endpoint_url, region
        self.consoles: set[str] = set()  # instance ids whose console output this watcher serves

    def stop(self) -> None:
        super().stop()
        uninstall_moto_console(self.consoles)

    def leftovers(self) -> list[str]:
        hooks = sorted(self.consoles & set(_CONSOLES))
        return super().leftovers() + [f"moto console hook for {i}" for i in hooks]

    def running(self):
        found = {}
        for page in self.ec2.get_paginator("describe_instances").paginate():
            for reservation in page["Reservations"]:
                for inst in reservation["Instances"]:
                    if inst["State"]["Name"] in EC2_ALIVE and inst.get("PrivateIpAddress"):
                        found[inst["InstanceId"]] = (inst["InstanceId"], lambda inst=inst: self.spec(inst))
        return found

    def power_off(self, vm) -> str:
        iid = vm.instance_id
        name = "instanceInitiatedShutdownBehavior"  # dlrun sets it to terminate; EC2's default is stop
        attr = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute=name)
        if attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate":
            self.ec2.terminate_instances(InstanceIds=[iid])
            return "terminated"
        self.ec2.stop_instances(InstanceIds=[iid])
        return "stopped"

    def spec(self, inst: dict) -> VmSpec:
        iid = inst["InstanceId"]
        data = self.ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        value = (data.get("UserData") or {}).get("Value")
        keys = []
        if inst.get("KeyName"):
            pairs = self.ec2.describe_key_pairs(KeyNames=[inst["KeyName"]], IncludePublicKey=True)
            keys = [p["PublicKey"] for p in pairs["KeyPairs"] if p.get("PublicKey")]
        install_moto_console(iid, lambda: self.lab.console_of(iid))
        self.consoles.add(iid)
        return VmSpec(instance_id=iid, private_ip=inst["PrivateIpAddress"],
                      public_ip=inst.get("PublicIpAddress"), user=self.user, authorized_keys=keys,
                      boot_script=base64.b64decode(value) if value else None, cloud_id=iid,
                      metadata=self._metadata(inst))

    def _metadata(self, inst: dict):
        """The VM's metadata service: its instance profile's credentials (moto STS), moto's S3 at its own port."""
        profile = (inst.get("IamInstanceProfile") or {}).get("Arn")
        role = (lambda: moto_role_credentials(self.endpoint_url, self.region, profile)) if profile else (lambda: None)
        port = urlparse(self.endpoint_url).port
        return lambda netns: VmMetadata(netns, role=role, s3_port=port)


class GceWatcher(Watcher):
    """FakeGce's RUNNING instances get VMs. Each VM gets GCE's metadata server for its own instance and
    forwarders to the fake Compute Engine and, given `gcs_port`, the fake Cloud Storage (metadata.py);
    its login user gets the `ssh-keys` of its metadata unless OS Login governs it (the guest agent then
    ignores ssh-keys: cloud.google.com/compute/docs/oslogin), and a guest power-off stops the instance
    (FakeGce.guest_shutdown: TERMINATED, disk kept) and nothing more: deleting it is the node's own job."""

    def __init__(self, lab: "VmLab", fake, user: str = "dlrun", interval_s: float = 0.3, gcs_port: int | None = None):
        self.source = f"gce:{fake.endpoint}"
        super().__init__(lab, user, interval_s)
        self.fake, self.gcs_port = fake, gcs_port
        self._previous_hook = fake.serial_port_output
        fake.serial_port_output = lambda zone, name: self.lab.console_of(name)

    def stop(self) -> None:
        super().stop()
        self.fake.serial_port_output = self._previous_hook

    def leftovers(self) -> list[str]:
        hooked = self.fake.serial_port_output is not self._previous_hook
        return super().leftovers() + (["FakeGce serial_port_output hook"] if hooked else [])

    def running(self):
        with self.fake._lock:
            instances = [copy.deepcopy(i) for i in self.fake.instances.values() if i["status"] in GCE_ALIVE]
        return {i["name"]: (i["id"], lambda i=i: self.spec(i)) for i in instances}

    def power_off(self, vm) -> str:
        return self.fake.guest_shutdown(vm.instance_id, vm.spec.cloud_id) or "gone already"

    def spec(self, inst: dict) -> VmSpec:
        nic = inst["networkInterfaces"][0]
        public = (nic.get("accessConfigs") or [{}])[0].get("natIP")
        items = {m["key"]: m.get("value", "") for m in (inst.get("metadata") or {}).get("items", [])}
        keys = [line.split(":", 1)[1] for line in items.get("ssh-keys", "").splitlines()
                if ":" in line and line.split(":", 1)[0] == self.user]
        if self.fake.os_login_on(inst):
            keys = []  # OS Login: the guest agent takes no keys from metadata
        script = items.get("startup-script")
        zone, name = inst["zone"].rsplit("/", 1)[-1], inst["name"]
        ports = (self.fake.port, self.gcs_port)
        return VmSpec(instance_id=inst["name"], private_ip=nic["networkIP"], public_ip=public, user=self.user,
                      authorized_keys=keys, boot_script=script.encode() if script is not None else None,
                      hostname=inst["name"], cloud_id=inst["id"],
                      # GCE's guest environment puts the metadata server's name in /etc/hosts ("# Added by
                      # Google"), which is how google.auth (metadata.google.internal) reaches it
                      extra_hosts="169.254.169.254 metadata.google.internal metadata  # Added by Google\n",
                      metadata=lambda netns: GceVmMetadata(netns, FakeGceMetadata.of_instance(self.fake, zone, name),
                                                           ports))


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"{what} after {timeout_s} s")
