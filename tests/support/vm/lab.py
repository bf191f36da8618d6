"""VmLab: emulated VMs behind the fake clouds, one per instance the cloud reports RUNNING.

    with VmLab() as lab:
        lab.watch_gce(fake_gce)                      # and/or lab.watch_ec2(endpoint_url, region)
        ... dlrun launches instances; each gets a VM booted from its startup script / user data ...
        vm = lab.wait_for_vm("node-name-or-i-id")
        subprocess.run(["ssh", "-F", lab.ssh_config, "-i", key, f"dlrun@{vm.spec.public_ip}", "true"])
        lab.restart("node-name-or-i-id")             # a host event / reboot: same disk, boots again
        lab.mirrors                                  # {"pypi": ..., "torch": ..., "apt": ...}: the lab's mirrors
    assert lab.leftovers() == []

Why a lab: it owns everything the VMs share (the bridge, the images, the package index, the SSH client
config mapping each public IP onto its private IP, the known_hosts of the VMs' fresh host keys) and cleans
all of it, including the debris a crashed run left (another lab's debris is left alone while its owner lives).

- Images (image.py): each VM boots the lab image standing for what its cloud was asked for: the
  deep-learning image for the clouds' deep-learning images (an AMI named "Deep Learning ...", a GCE image
  of deeplearning-platform-release), else the stock one (a real Debian 12 root, rootfs.py).
- Packages (package_index.py): `lab.mirrors` are the URLs of the lab's PyPI mirror and torch wheel
  mirror, served on the bridge's address, the only address off the VM's own network a VM can reach. dlrun
  reaches them through its user setting, $DLRUN_HOME/config.yaml `mirrors:` (fixtures.write_mirrors).
  `lab.mirrors["apt"]` is a Debian mirror (apt_mirror.py: deb.debian.org's signed index and the .debs of
  podman's closure), what `mirrors.apt` names.
- Images (oci_images.py, registry.py): `lab.registry` is two real OCI registries (Debian's docker-registry)
  on the bridge, one public (`lab.registry.host`), one behind basic auth (`private_host`, `username`,
  `password`), serving images built from Debian roots; `lab.registry.image("dlrun-lab/python:bookworm")` is
  the full reference a job's `image:` names. Started at the first use of `lab.registry`.
The Debian root, the wheels, the apt mirror and the registry's images are cached across sessions
(~/.cache/dlrun-lab); a lab opening builds or downloads what the cache lacks, under a file lock (once per
machine, not once per lab).
"""
from __future__ import annotations

import itertools
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Callable

from . import net
from .clouds import Ec2Watcher, GceWatcher, Watcher, wait_until
from .image import IMAGE_USED_GB, Image, build_images, image_for
from .machine import Vm, VmSpec, loop_devices, start_ticks
from .apt_mirror import AptMirror, mirror_dir
from .package_index import PackageIndex, wheel_dir
from .registry import LabRegistry
from .rootfs import locked

LAB_DIR_PREFIX = "dlvlab-"
LAB_LOCK = "dlvlab.lock"  # (not a LAB_DIR_PREFIX name)


def _process_start(pid: int) -> str | None:
    try:
        return str(start_ticks(str(pid)))
    except (OSError, IndexError):
        return None


def _lab_alive(lab_dir: Path) -> bool:
    """A lab lives while the process that wrote its owner file does (same pid and start time)."""
    try:
        pid, start = (lab_dir / "owner").read_text().split()
    except (OSError, ValueError):
        return False
    return _process_start(int(pid)) == start


class VmLab:
    def __init__(self, *, sshd_delay_s: float = 0.0, poll_interval_s: float = 0.3,
                 boot_timeout_s: float = 30):
        self.sshd_delay_s = sshd_delay_s  # for VMs booted from now on; sshd_delays overrides per instance
        self.sshd_delays: dict[str, float] = {}
        self.poll_interval_s, self.boot_timeout_s = poll_interval_s, boot_timeout_s
        self.vms: dict[str, Vm] = {}  # instance id (GCE: name) -> running VM
        self.errors: list[str] = []  # boot failures, one line each (plus the init's output)
        self.dead: list[Vm] = []
        self.dir: Path | None = None
        self._sources: dict[str, str] = {}  # instance id -> watcher source that booted it
        self._failed: dict[str, str] = {}  # instance id -> cloud id whose boot failed (not retried)
        self._watchers: list[Watcher] = []
        self._lock = threading.RLock()
        self._index = itertools.count(1)
        self._open = False
        self.images: dict[str, Image] = {}
        self.index: PackageIndex | None = None
        self.apt: AptMirror | None = None
        self._registry: LabRegistry | None = None

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "VmLab":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> "VmLab":
        tmp = Path(tempfile.gettempdir())
        # One lab at a time cleans up and registers (its owner file): a lab opening beside another (two pytest
        # workers) would otherwise take the other's new directory and bridge, made between its look at who is
        # alive and its clean-up, for a crashed run's debris and delete them.
        with locked(tmp / LAB_LOCK):
            alive = {d.name[len(LAB_DIR_PREFIX):] for d in tmp.glob(LAB_DIR_PREFIX + "*") if _lab_alive(d)}
            net.remove_stale(alive)
            for d in tmp.glob(LAB_DIR_PREFIX + "*"):
                if d.name[len(LAB_DIR_PREFIX):] not in alive:
                    shutil.rmtree(d, ignore_errors=True)
            taken = alive | {net.lab_id_of(n) for n in net.our_netns() + net.our_links()}
            self.lab_id = next(i for i in iter(lambda: secrets.token_hex(2), None) if i not in taken)
            self.net = net.LabNetwork(self.lab_id)
            self.dir = tmp / f"{LAB_DIR_PREFIX}{self.lab_id}"
            self.dir.mkdir(mode=0o755)
            (self.dir / "owner").write_text(f"{os.getpid()} {_process_start(os.getpid())}\n")
        (self.dir / "vms").mkdir()
        self._open = True
        try:
            self.net.create()
            self.images = build_images(self.dir / "image")
            self.index = PackageIndex(wheel_dir(), self.net.host_ip).start()
            self.apt = AptMirror(mirror_dir(), self.net.host_ip).start()
            self._write_ssh_files()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stops the watchers, kills every VM, removes the bridge and the lab's directory. Idempotent."""
        with self._lock:
            self._open = False  # a watcher's sync in flight boots nothing more
        for watcher in self._watchers:
            watcher.stop()
        for server in (self.index, self.apt, self._registry):
            if server is not None:
                server.stop()
        with self._lock:
            for instance_id in list(self.vms):
                try:
                    self.kill(instance_id)
                except Exception as e:  # kill the others all the same; leftovers() will tell
                    self.errors.append(f"{instance_id}: kill failed: {type(e).__name__}: {e}")
        if self.dir is not None:
            net.remove_lab(self.lab_id)
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def mirrors(self) -> dict[str, str]:
        """{"pypi": "http://BRIDGE:PORT/simple", "torch": "http://BRIDGE:PORT/whl", "apt": "http://BRIDGE:PORT/debian"}:
        what a VM can install from (the apt mirror: apt_mirror.py)."""
        return {**self.index.mirrors, "apt": self.apt.url}

    @property
    def registry(self) -> LabRegistry:
        """The lab's OCI registries (registry.py), started at the first use (its images are built then if the
        cache lacks them): only the tests of containers pay for them. Like a VM, they die with the thread that
        first used this (setpriv --pdeathsig): use it from the test's own thread."""
        with self._lock:
            if not self._open:
                raise RuntimeError("the VM lab is closed")
            if self._registry is None:
                self._registry = LabRegistry(self.dir / "registry", self.net.host_ip)
                self._registry.start()
            return self._registry

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    # ------------------------------------------------------------ clouds
    def watch_ec2(self, endpoint_url: str, region: str, *, user: str = "ubuntu") -> Ec2Watcher:
        return self._watch(_Ec2(self, endpoint_url, region, user, self.poll_interval_s))

    def watch_gce(self, fake, *, user: str = "dlrun", gcs_port: int | None = None) -> GceWatcher:
        """`gcs_port`: the fake Cloud Storage's port, forwarded into each VM like the fake GCE's (where the
        GceWatcher takes it)."""
        extra = {} if gcs_port is None else {"gcs_port": gcs_port}
        return self._watch(_Gce(self, fake, user, self.poll_interval_s, **extra))

    def _watch(self, watcher):
        self._watchers.append(watcher)
        return watcher.start()

    def powered_off(self, source: str) -> list[Vm]:
        """This source's VMs whose guest powered itself off (`shutdown -h now`, ...) and whose cloud has not
        acted on it yet: the watcher has the cloud stop or terminate their instance (power.py)."""
        with self._lock:
            return [vm for key, vm in self.vms.items() if self._sources.get(key) == source
                    and not vm.power_handled and (vm.power_request() or {}).get("action") == "poweroff"]

    def sync(self, source: str, running: dict[str, tuple[str, Callable[[], VmSpec]]]) -> None:
        """Boots a VM for each running instance without one; kills this source's VMs not running."""
        with self._lock:
            if not self._open:
                return
            for key, vm in list(self.vms.items()):
                if self._sources.get(key) == source and (key not in running
                                                         or running[key][0] != vm.spec.cloud_id):
                    self.kill(key)
            for key in [k for k, cloud_id in self._failed.items() if running.get(k, ("",))[0] != cloud_id]:
                del self._failed[key]
            for key, (cloud_id, make_spec) in running.items():
                if key not in self.vms and key not in self._failed:
                    try:
                        self.boot(make_spec(), source)
                    except Exception as e:
                        self._failed[key] = cloud_id
                        self.errors.append(f"{key}: {type(e).__name__}: {e}")

    # ------------------------------------------------------------ VMs
    def boot(self, spec: VmSpec, source: str = "manual") -> Vm:
        """Boots a VM for `spec` (watchers call this; tests may too). The calling thread must outlive the
        VM: the VM is killed when the thread that started it exits (see machine.py)."""
        with self._lock:
            if not self._open:
                raise RuntimeError("the VM lab is closed")
            if spec.instance_id in self.vms:
                raise ValueError(f"{spec.instance_id} already has a VM")
            spec.sshd_delay_s = self.sshd_delays.get(spec.instance_id, spec.sshd_delay_s or self.sshd_delay_s)
            index = next(self._index)
            vm_dir = self.dir / "vms" / f"{index}-{spec.instance_id}"
            vm_dir.mkdir()
            vm = Vm(spec, index, self.net.netns(index), vm_dir)
            try:
                _, vm.address, vm.routed = self.net.add_vm(index, spec.addresses)
                if spec.metadata is not None:
                    vm.metadata = spec.metadata(vm.netns).start()
                vm.boot(self.images[image_for(spec.cloud_image)], self.boot_timeout_s)
            except BaseException:
                if vm.metadata is not None:
                    vm.metadata.stop()
                vm.kill()
                self.net.remove_vm(index, vm.routed)
                vm.remove_dir()
                raise
            self._sources[spec.instance_id] = source
            self._write_ssh_files([*self.vms.values(), vm])
            self.vms[spec.instance_id] = vm  # last: a VM in lab.vms is fully booted and in the SSH files
            return vm

    def restart(self, instance_id: str) -> Vm:
        """What a reboot or a host event's restart does to the instance's VM (Vm.restart): same disk,
        same addresses, every process started again by its boot. The calling thread must outlive the VM."""
        with self._lock:
            vm = self.vms[instance_id]
            return vm.restart(self.images[vm.image], self.boot_timeout_s)

    def kill(self, instance_id: str) -> None:
        """What the cloud does to a terminated instance: every process dies, the VM's network and disk go."""
        with self._lock:
            vm = self.vms.get(instance_id)
            if vm is None:
                return
            try:
                vm.kill()
            finally:
                if vm.metadata is not None:
                    vm.metadata.stop()
                self.net.remove_vm(vm.index, vm.routed)
                vm.remove_dir()
                self.dead.append(vm)
                self._write_ssh_files([v for v in self.vms.values() if v is not vm])
                self._sources.pop(instance_id, None)
                del self.vms[instance_id]  # last: a VM gone from lab.vms has left nothing behind

    def console_of(self, instance_id: str) -> str:
        """The console log of the instance's VM, running or dead ("" if it never had one)."""
        dead = [v for v in self.dead if v.instance_id == instance_id]
        vm = self.vms.get(instance_id) or (dead[-1] if dead else None)
        return vm.console_log() if vm else ""

    def wait_for_vm(self, instance_id: str, timeout_s: float = 30) -> Vm:
        def ready():
            if instance_id in self._failed:
                raise RuntimeError(f"VM for {instance_id} failed to boot: {self.errors}")
            return self.vms.get(instance_id)
        return wait_until(ready, timeout_s, f"no VM for {instance_id}")

    def wait_gone(self, instance_id: str, timeout_s: float = 30) -> None:
        wait_until(lambda: instance_id not in self.vms, timeout_s, f"the VM of {instance_id} still runs")

    def _write_ssh_files(self, vms: list[Vm] | None = None) -> None:
        """lab.ssh_config maps each VM's public and private IP onto its lab address (net.py); lab.known_hosts
        has the VMs' host keys under all three."""
        config = [f"# VM lab {self.lab_id}: each running VM's public and private IP -> its lab address"]
        hosts = []
        for vm in self.vms.values() if vms is None else vms:
            config += [f"Host {a}\n  HostName {vm.address}" for a in vm.spec.addresses]
            hosts.append(f"{','.join([*vm.spec.addresses, vm.address])} {vm.host_key}")
        for path, lines in ((self.ssh_config, config), (self.known_hosts, hosts)):
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(line + "\n" for line in lines))
            tmp.replace(path)

    # ------------------------------------------------------------ leftovers
    def leftovers(self) -> list[str]:
        """Everything of this lab still present that should not be: what dead VMs left, and after close()
        anything at all (namespaces, links, routes, processes, mounts, directories, watcher threads)."""
        if self.dir is None:
            return []
        with self._lock:
            live = list(self.vms.values()) if self._open else []
            expected = {x for vm in live for x in (f"netns {vm.netns}", f"link {self.net.veth(vm.index)}")}
            found = []
            if self._open:
                expected.add(f"link {self.net.bridge}")
                live_ips = {a for vm in live for a in vm.routed}
                found += [f"route {r}" for r in self.net.routes() if r not in live_ips]
            elif self.dir.exists():
                found.append(f"dir {self.dir}")
            found += [x for x in net.LabNetwork(self.lab_id).present() if x not in expected]
            live_pids = {pid for vm in live for pid, _ in vm.processes()}
            for vm in self.dead:
                found += [f"process {pid} ({comm}) of VM {vm.instance_id}" for pid, comm in vm.processes()
                          if pid not in live_pids]  # (a namespace's inode number may be reused by a live VM)
                if vm.vm_dir.exists():
                    found.append(f"dir {vm.vm_dir}")
            live_disks = tuple(f"{vm.vm_dir}/" for vm in live)
            found += [f"loop device {d}" for d in loop_devices(str(self.dir) + "/")
                      if not d.split(" (", 1)[1].startswith(live_disks)]
            live_mounts = {f"/run/netns/{vm.netns}" for vm in live}
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4]
                ours = point.startswith(str(self.dir)) or point.startswith(f"/run/netns/{self.net.prefix}")
                if ours and point not in live_mounts:
                    found.append(f"mount {point}")
            if not self._open:
                found += [x for w in self._watchers for x in w.leftovers()]
                registries = self._registry.pids() if self._registry else []
                found += [f"process {pid} (docker-registry)" for pid in registries]
            return found


def _disk_gb(volume_gb: float) -> float:
    return max(1.0, float(volume_gb) - IMAGE_USED_GB)


class _Ec2(Ec2Watcher):
    """Ec2Watcher, with what the instance was launched from in its VmSpec (the AMI's name and
    description, looked up once per AMI) for the lab's choice of image, and its root volume's size (EC2's
    default: the AMI's, 8 GiB for Canonical's) for the VM's disk."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._amis: dict[str, str] = {}

    def spec(self, inst: dict) -> VmSpec:
        spec = super().spec(inst)
        ami = inst.get("ImageId") or ""
        if ami and ami not in self._amis:
            images = self.ec2.describe_images(ImageIds=[ami]).get("Images") or [{}]
            self._amis[ami] = f"{ami} {images[0].get('Name', '')} {images[0].get('Description', '')}"
        spec.cloud_image = self._amis.get(ami, "")
        volumes = self.ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id",
                                                      "Values": [inst["InstanceId"]]}])["Volumes"]
        root = [v["Size"] for v in volumes
                if any(a.get("Device") == inst.get("RootDeviceName") for a in v.get("Attachments", []))]
        if root:
            spec.disk_gb = _disk_gb(root[0])
        return spec


class _Gce(GceWatcher):
    """GceWatcher, with the boot disk's source image in its VmSpec for the lab's choice of image, and its
    size (GCE's default: 10 GB) for the VM's disk."""

    def spec(self, inst: dict) -> VmSpec:
        spec = super().spec(inst)
        boot = [d for d in inst.get("disks") or [] if d.get("boot")] or [{}]
        params = boot[0].get("initializeParams") or {}
        spec.cloud_image = params.get("sourceImage", "")
        spec.disk_gb = _disk_gb(params.get("diskSizeGb") or 10)
        spec.script_runner = "gce-startup-script"
        return spec
