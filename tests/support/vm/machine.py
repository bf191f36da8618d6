"""One emulated VM: a network namespace on the lab's bridge plus mount, PID and UTS namespaces whose
init (vm_init.py) builds a private filesystem, runs the instance's boot script and a real sshd.

Why namespaces and not containers or real VMs: they need nothing but the kernel and util-linux, boot in
a fraction of a second, and killing the PID namespace's init kills every process of the VM at once
(Ray's raylet and gcs_server included), which is what a cloud does to a terminated instance.

The init is started through `setpriv --pdeathsig KILL` and `unshare --kill-child`: if the test process
dies without cleaning up, the VM dies with it (the thread that booted it must live as long as the VM:
the lab boots from its own long-lived threads or the caller's).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .image import Image
from .power import MARKER
from .vmfiles import USER_DATA, vm_files

INIT = Path(__file__).with_name("vm_init.py")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


DEFAULT_DISK_GB = 30.0


class VmBootError(RuntimeError):
    pass


def loop_devices(prefix: str) -> list[str]:
    """'loopN (backing file)' for each loop device whose backing file is under `prefix`."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            name = backing.read_text().strip()
        except OSError:
            continue
        if name.startswith(prefix):
            found.append(f"{backing.parts[3]} ({name})")
    return found


def make_disk(path: Path, size_gb: float) -> None:
    """An empty ext4 file system in a sparse file: the VM's root volume (mounted by vm_init.py). No
    journal: the volume dies with the VM, and a journal's first writes cost time here."""
    with open(path, "wb") as f:
        f.truncate(int(size_gb * 2**30))
    proc = subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E",
                           "lazy_itable_init=1,lazy_journal_init=1", str(path)],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise VmBootError(f"mkfs.ext4 {path}: {proc.stderr.strip()}")


@dataclass
class VmSpec:
    instance_id: str  # EC2 instance id, or GCE instance name
    private_ip: str
    public_ip: str | None
    user: str  # the image's login user (ubuntu on AWS, dlrun on GCP)
    authorized_keys: list[str]
    boot_script: bytes | None = None
    hostname: str = ""
    sshd_delay_s: float = 0.0
    cloud_id: str = ""  # what the cloud would need to tell a replacement apart (GCE's numeric id)
    metadata: object = None  # netns -> metadata.VmMetadata: the VM's 169.254.169.254 (EC2 VMs)
    extra_hosts: str = ""  # more /etc/hosts lines, as the cloud's image has them (GCE: metadata.google.internal)
    cloud_image: str = ""  # what the cloud was asked to boot (AMI name, GCE source image): picks the lab image
    disk_gb: float = DEFAULT_DISK_GB  # the root volume's size (what the VM can write over its image)
    # who runs boot_script: "cloud-init" (EC2 user data: once per instance, from USER_DATA) or
    # "gce-startup-script" (GCE's guest agent: at every boot, from a fresh temporary file)
    script_runner: str = "cloud-init"

    def __post_init__(self):
        self.hostname = self.hostname or "ip-" + self.private_ip.replace(".", "-")

    @property
    def addresses(self) -> list[str]:
        return [self.private_ip] + ([self.public_ip] if self.public_ip else [])


@dataclass
class Vm:
    spec: VmSpec
    index: int
    netns: str
    vm_dir: Path
    host_key: str = ""  # the VM's public host key line
    init_pid: int = 0  # in the root PID namespace
    pidns: str = ""  # 'pid:[inode]' of the VM's PID namespace, to find its processes
    netns_id: str = ""  # 'net:[inode]'
    power_handled: str = ""  # what the cloud did once the guest powered off (see power.py)
    image: str = ""  # the lab image it booted (image.py)
    boots: int = 0  # how many times it booted (restarts: Vm.restart)
    _files: list = field(default_factory=list, repr=False)  # vmfiles.vm_files' entries, kept for restarts
    address: str = ""  # its lab address, always routed to it from here (net.py)
    routed: list[str] = field(default_factory=list)  # the addresses routed to it from here (lab address first)
    metadata: object = None  # its running metadata.VmMetadata, if its cloud gives it one
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _console_after_death: str | None = field(default=None, repr=False)
    # when it was last killed, in /proc/PID/stat start-time ticks: a namespace's inode number is reused once it is
    # gone (by this lab's next VM or by another lab running beside it, as under `pytest -n`), and every process
    # in a reused namespace started after this
    killed_at_ticks: int | None = field(default=None, repr=False)

    @property
    def instance_id(self) -> str:
        return self.spec.instance_id

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # ------------------------------------------------------------ boot / kill
    def boot(self, image: Image, timeout_s: float = 30, *, first_boot: bool = True) -> "Vm":
        """Starts the VM's init (vm_init.py) on `image`; a first boot makes the VM's files and disk, a later
        one (restart) boots the disk as the last boot left it."""
        self.image = image.name
        disk = self.vm_dir / "disk.img"
        if first_boot:
            self._files, self.host_key = vm_files(
                self.vm_dir, image, user=self.spec.user, hostname=self.spec.hostname,
                private_ip=self.spec.private_ip, authorized_keys=self.spec.authorized_keys,
                boot_script=self.spec.boot_script, runner=self.spec.script_runner,
                extra_hosts=self.spec.extra_hosts)
            for d in ("root", "disk"):  # mount points: the VM's root overlay, its disk
                (self.vm_dir / d).mkdir(parents=True)
            make_disk(disk, self.spec.disk_gb)
        self.boots += 1
        gce_script = self.vm_dir / "files" / "startup-script"
        spec_path = self.vm_dir / "spec.json"
        spec_path.write_text(json.dumps({
            "vm_dir": str(self.vm_dir), "image": image.spec(), "disk_image": str(disk), "hostname": self.spec.hostname,
            "files": self._files, "sshd_delay_s": self.spec.sshd_delay_s, "first_boot": first_boot,
            "user_data": USER_DATA if self.spec.boot_script is not None and self.spec.script_runner == "cloud-init"
            else None,
            "startup_script": str(gce_script) if gce_script.exists() else None,
            "console_log": str(self.console_path), "sshd_log": str(self.vm_dir / "sshd.log"),
            "init_log": str(self.vm_dir / "init.log")}, indent=1))
        self._proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "ip", "netns", "exec", self.netns,
             "unshare", "--mount", "--pid", "--uts", "--fork", "--mount-proc", "--propagation", "private",
             "--kill-child=SIGKILL", os.path.realpath(sys.executable), "-I", "-S", str(INIT), str(spec_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, env={"PATH": PATH})
        out = self._read_until_ready(timeout_s)
        if out != "ready":
            self.kill()
            raise VmBootError(f"VM {self.instance_id} did not boot:\n{out}")
        self.init_pid = self._child_of(self._proc.pid)
        self.pidns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        self.netns_id = os.readlink(f"/proc/{self.init_pid}/ns/net")
        return self

    def _read_until_ready(self, timeout_s: float) -> str:
        """'ready' once the init has built the VM, else what it printed (its traceback)."""
        deadline, fd, out = time.monotonic() + timeout_s, self._proc.stdout.fileno(), b""
        while time.monotonic() < deadline:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
            if out.startswith(b"ready\n"):
                self._proc.stdout.close()
                return "ready"
        return out.decode(errors="replace") or f"no answer in {timeout_s:.0f} s"

    @staticmethod
    def _child_of(pid: int) -> int:
        for _ in range(200):
            try:
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                children = []
            if children:
                return int(children[0])
            time.sleep(0.01)
        raise VmBootError(f"no init process under unshare ({pid})")

    def restart(self, image: Image, timeout_s: float = 30) -> "Vm":
        """What a reboot or a host event's restart does to the machine: every process ends (at once: no
        shutdown is emulated), the disk stays as it was, and the VM boots again from it (vm_init.py: cloud-
        init's per-boot scripts run, EC2's user data does not run again, GCE's startup-script does). The
        calling thread must outlive the VM, as for boot()."""
        self._stop()
        return self.boot(image, timeout_s, first_boot=False)

    def kill(self) -> None:
        """Terminates the VM: SIGKILL to its init kills every process in its PID namespace."""
        if self._console_after_death is None:
            self._console_after_death = self.console_log()
        self.killed_at_ticks = _ticks_now()
        self._stop()

    def _stop(self) -> None:
        for pid in (self.init_pid, self._proc.pid if self._proc else 0):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if self._proc.stdout and not self._proc.stdout.closed:
                self._proc.stdout.close()
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.02)
        # the disk's loop device detaches (autoclear) once the VM's mount namespace is gone: soon after
        while loop_devices(str(self.vm_dir) + "/") and time.monotonic() < deadline:
            time.sleep(0.02)

    def remove_dir(self) -> None:
        shutil.rmtree(self.vm_dir, ignore_errors=True)

    # ------------------------------------------------------------ inspection and use
    @property
    def console_path(self) -> Path:
        return self.vm_dir / "console.log"

    def console_log(self) -> str:
        """What the VM wrote to its serial console: the boot script's output, as the cloud reports it."""
        if self._console_after_death is not None:
            return self._console_after_death
        try:
            return self.console_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def power_request(self) -> dict | None:
        """{"action": "poweroff" or "halt", "command": ..., "time": ...} once the guest ran `shutdown -h now`,
        `poweroff`, `halt`, ... and its init stopped every process (power.py); None until then."""
        try:
            return json.loads((self.vm_dir / MARKER).read_text())
        except (OSError, ValueError):
            return None

    def processes(self) -> list[tuple[int, str]]:
        """(pid, command) of every process in this VM's PID or network namespace, as seen from the host; once
        it was killed, only those that started before (a later one is in a namespace reusing the inode)."""
        found = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                ns = (os.readlink(f"/proc/{entry.name}/ns/pid"), os.readlink(f"/proc/{entry.name}/ns/net"))
                comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
                if not ((self.pidns and ns[0] == self.pidns) or (self.netns_id and ns[1] == self.netns_id)):
                    continue
                if self.killed_at_ticks is not None and start_ticks(entry.name) > self.killed_at_ticks:
                    continue
            except OSError:
                continue
            found.append((int(entry.name), comm))
        return found

    def module_processes(self, module: str) -> list[int]:
        """The pids of this VM's Python processes running `-m module` as their own program (not a wrapper such as
        `python -m jobs.notice -- python -m MODULE` that names it in its arguments)."""
        found = []
        for pid, _ in self.processes():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            first = next((i for i, a in enumerate(argv) if a == b"-m"), None)
            if first is not None and first + 1 < len(argv) and argv[first + 1] == module.encode():
                found.append(pid)
        return found

    @contextlib.contextmanager
    def paused(self, module: str):
        """The VM's `-m module` processes stopped (SIGSTOP) for the block and continued after, as a VM whose CPU
        the hypervisor withholds: a test acts on the cluster (a notice, a re-attach) at a known point of the
        training, however fast or slow this machine trains. Yields the pids (at least one: fails otherwise)."""
        pids = self.module_processes(module)
        assert pids, f"no `-m {module}` process on {self.instance_id}: {self.processes()}"
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield pids
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass  # the VM was terminated meanwhile

    def run(self, command: str, *, user: str = "root", timeout: float = 60,
            check: bool = False) -> subprocess.CompletedProcess:
        """Runs a bash command inside the VM (all its namespaces), with a login-like clean environment."""
        home = "/root" if user == "root" else f"/home/{user}"
        inner = ["env", "-i", f"PATH={PATH}", f"HOME={home}", f"USER={user}", "bash", "-c", command]
        if user != "root":
            inner = ["setpriv", "--reuid", user, "--regid", user, "--init-groups", *inner]
        argv = ["nsenter", "-t", str(self.init_pid), "-m", "-u", "-n", "-p", "--wd", *inner]  # the init's cwd: the VM's /
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=check)

    def wait_for_ssh(self, timeout_s: float = 30) -> None:
        """Until the VM's sshd answers with its banner (it starts after boot() returns, or later still
        with sshd_delay_s), as a client probing port 22 would see it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with socket.create_connection((self.address or self.spec.private_ip, 22), timeout=2) as conn:
                    if conn.recv(7) == b"SSH-2.0":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"no sshd on {self.instance_id} after {timeout_s} s")
            time.sleep(0.05)

    def wait_for_console(self, text: str, timeout_s: float = 30) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            log = self.console_log()
            if text in log:
                return log
            time.sleep(0.05)
        raise TimeoutError(f"{text!r} not in the console of {self.instance_id} after {timeout_s} s:\n"
                           f"{self.console_log()}")


def start_ticks(pid: str) -> int:
    """A process's start time, in clock ticks since boot (/proc/PID/stat's 22nd field)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _ticks_now() -> int:
    """Now on the clock of start_ticks (CLOCK_BOOTTIME in the kernel's USER_HZ ticks)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))
