"""PID 1 of an emulated VM: mounts the VM's root file system, moves into it, then runs the boot script and sshd.

Started by machine.Vm as `ip netns exec NS unshare --mount --pid --uts --fork --mount-proc ... python -I -S
vm_init.py SPEC.json`, so it already sits in the VM's network namespace and in fresh mount, PID and UTS
namespaces (mount propagation private: nothing mounted here is seen by the host). Standard library only,
everything imported first: it runs on the test runner's interpreter, which it can no longer see once it
has moved into the VM's root (the process keeps running from what it mapped, as an init would).

What it builds, as a machine booting from its image would have it:
- / is an overlay of the image's layers (SPEC.image.layers, read-only, top first: image.py) under the
  VM's own writable layer on its "root volume": an ext4 file system in a sparse file (SPEC.disk_image,
  made by machine.py) mounted through a loop device. Why not a tmpfs: a VM holding a venv of torch and
  Ray writes ~2 GB, which would sit in RAM; why not a directory on this machine's disk: removing ~40,000
  files took 50 s here, unlinking one sparse file takes milliseconds. Its size is the volume's, so a full
  disk fails as on the cloud;
- /var/lib/containers and /home bound from directories of the disk itself (ON_DISK: a real VM's root is
  ext4, and container storage's overlay mounts cannot have their upper layer on the VM's overlay root:
  root's podman keeps its images in /var/lib/containers, a rootless user's podman in
  ~/.local/share/containers);
- /proc (this PID namespace's), /sys (read-only, this network namespace's view) with /sys/fs/cgroup a
  read-only cgroup v2 (CGROUP_NOTE), a minimal /dev (null,
  zero, full, random, urandom, tty, a private devpts for sshd's PTYs, ptmx, fd links, /dev/shm as tmpfs),
  /run as tmpfs (with /run/sshd and /run/lock), as systemd mounts them; and what every systemd VM has
  that rootless podman needs (ROOTLESS_NOTE): /dev/mqueue, /dev/net/tun, / as a shared mount;
- then pivot_root: the host's file systems (its /usr, the test venv, pyenv, the project checkout, the
  lab's directories) are detached from this namespace, so nothing of them is reachable from the VM;
- the VM's files (vmfiles.py: users, host key, sshd_config, hostname, hosts, user data) are written,
  the login user's home gets /etc/skel's files, the host name is set in the UTS namespace.
- then the boot's scripts (run_boot_scripts): cloud-init's per-boot scripts, EC2 user data on the first
  boot only, GCE's startup-script at every boot. A restart (machine.Vm.restart: SPEC.first_boot false)
  mounts the same disk again, empties /tmp as systemd-tmpfiles does, and runs what a boot runs.
It prints "ready" on stdout once done (or a traceback, then exits 1), then logs to SPEC.init_log (these
logs and the console were opened before the pivot: the VM writes to them through those descriptors).

Power-off (see power.py, whose names are repeated here: this script imports nothing of the harness): like
systemd, the init takes SIGRTMIN+4 as "power off" and SIGRTMIN+3 as "halt" (the VM's shutdown, poweroff,
halt and systemctl send them, with the request in REQUEST); it then stops every other process of the VM,
writes "reboot: Power down" to the console and the marker SPEC.vm_dir/MARKER for the lab, and idles.
Not reproduced: systemd and its units (journald, logind, timers, unattended-upgrades; so no /run/user/UID:
rootless podman falls back to /tmp/podman-run-UID), a kernel of the VM's own (the host's is shared),
cgroup limits (a VM sees the host's CPUs and memory), an IPC namespace of its own (its /dev/mqueue shows the
host's queues), /dev/fuse (rootless podman's native overlay on the ext4 /home needs no fuse-overlayfs).
"""
import ctypes
import json
import os
import platform
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import traceback

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_SHARED = 1, 2, 4, 8, 32, 4096, 16384, 1 << 20
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}[platform.machine()]
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POWER_SIGNALS = {signal.SIGRTMIN + 4: "poweroff", signal.SIGRTMIN + 3: "halt"}  # systemd's
MARKER, REQUEST, GRACE_S = "power", "/run/vm-power/request", 2.0  # as in power.py
DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
TTY_GID = 5  # Debian's tty group
# where a program needs the root's file system to be a real one: container storage (podman's overlay driver
# makes overlay mounts whose upper layer cannot be on an overlay: "'overlay' is not supported over overlayfs")
ON_DISK = ("/var/lib/containers", "/home")
TUN = (10, 200)  # /dev/net/tun: the misc device's major, TUN_MINOR (linux/miscdevice.h)
ROOTLESS_NOTE = """What a real VM's systemd sets up at boot that rootless podman (a non-root user's, with
--userns=keep-id as Ray's image_uri runs it) needs, and the lab's /dev would otherwise lack:
- /dev/mqueue, a mqueue file system (systemd's dev-mqueue.mount, mount_setup.c's table): `podman run --ipc=host`
  binds it into the container, and fails without it ("statfs /dev/mqueue: no such file or directory");
- /dev/net/tun (char 10:200; devtmpfs has it, the tun module loads at its first open): rootless podman's default
  network, slirp4netns, opens it ("open(\"/dev/net/tun\"): No such file or directory" without it);
- / and every mount under it shared (systemd's mount_setup: `mount --make-rshared /`, for containers and
  services): podman warns otherwise ("\"/\" is not a shared mount, this could cause issues or missing mounts
  with rootless containers"). Shared within the VM's mount namespace only: it was made a private copy of the
  host's (unshare), so no mount propagates to or from this machine."""
CGROUP_NOTE = """/sys/fs/cgroup is cgroup v2, as systemd mounts it on Debian 12 / Ubuntu 22.04 (crun refuses to run a
container without it: "invalid file system type on '/sys/fs/cgroup'"), but read-only: it is this host's own
hierarchy (no cgroup namespace, no controller of its own: this host's controllers are all bound to v1), which a VM
must not write to (a container's cgroup would stay in the host's tree once its VM is killed). Podman in a VM
therefore runs with cgroups disabled (the lab image's containers.conf.d: image.py), as dlrun's boot never asks for
cgroup limits of its own."""
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags=0, data=""):
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                       flags, data.encode() if data else None), f"mount {fstype or 'bind'} {source} on {target} ({data})")


def tmpfs(target, mode="755", flags=MS_NOSUID | MS_NODEV):
    mount("tmpfs", target, "tmpfs", flags, f"mode={mode}")


def mount_root(spec):
    """The VM's root: an overlay of the image's layers under its own disk; returns where it is mounted."""
    vm_dir = spec["vm_dir"]
    # mount(8)'s -o loop attaches a loop device with autoclear: it detaches once this namespace is gone
    proc = subprocess.run(["mount", "-o", "loop", spec["disk_image"], f"{vm_dir}/disk"], env={"PATH": PATH},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mounting the VM's disk: {proc.stderr.strip()}")
    root, upper, work = f"{vm_dir}/root", f"{vm_dir}/disk/upper", f"{vm_dir}/disk/work"
    os.makedirs(upper, exist_ok=True)  # (a restart finds them on its disk)
    os.makedirs(work, exist_ok=True)
    lower = ":".join(spec["image"]["layers"])
    mount("overlay", root, "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")
    for path in ON_DISK:  # a real VM's root is ext4 throughout: these are on the disk itself, not the overlay
        own = f"{vm_dir}/disk/{path.strip('/').replace('/', '-')}"
        os.makedirs(own, exist_ok=True)
        os.makedirs(f"{root}{path}", exist_ok=True)
        mount(own, f"{root}{path}", None, MS_BIND)
    return root


def mount_system(root):
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount("sysfs", f"{root}/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    try:  # read-only: see CGROUP_NOTE
        mount("cgroup2", f"{root}/sys/fs/cgroup", "cgroup2", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        pass  # a kernel without cgroup v2: the VM has no cgroup mount (crun then refuses to run a container)
    dev = f"{root}/dev"
    tmpfs(dev, "755", MS_NOSUID)
    for name, (major, minor) in DEVICES.items():
        os.mknod(f"{dev}/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"{dev}/{name}", 0o666)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/pts")
    mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          f"newinstance,ptmxmode=0666,mode=0620,gid={TTY_GID}")
    os.mkdir(f"{dev}/shm")
    tmpfs(f"{dev}/shm", "1777")
    os.mkdir(f"{dev}/mqueue")  # (ROOTLESS_NOTE)
    mount("mqueue", f"{dev}/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.mkdir(f"{dev}/net")
    os.mknod(f"{dev}/net/tun", 0o666 | stat.S_IFCHR, os.makedev(*TUN))
    os.chmod(f"{dev}/net/tun", 0o666)
    tmpfs(f"{root}/run", "755")
    for path, mode in (("sshd", 0o755), ("lock", 0o1777)):
        os.mkdir(f"{root}/run/{path}")
        os.chmod(f"{root}/run/{path}", mode)


def pivot_into(root):
    """pivot_root(2) with new and old root at the same place, then the old one detached (as
    switch_root/runc do): afterwards only the VM's mounts exist in this namespace."""
    os.chdir(root)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), f"pivot_root into {root}")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the host's root")
    os.chdir("/")
    mount("none", "/", None, MS_REC | MS_SHARED)  # as systemd makes it (ROOTLESS_NOTE)


def write_files(files):
    for f, data in files:
        os.makedirs(os.path.dirname(f["path"]), exist_ok=True)
        for d in f.get("dirs", []):  # (path, mode, uid, gid) of directories to create with owners
            os.makedirs(d[0], exist_ok=True)
            os.chmod(d[0], d[1])
            os.chown(d[0], d[2], d[3])
        if f.get("skel") and os.path.isdir("/etc/skel"):  # as `useradd -m` does
            uid, gid = f["uid"], f["gid"]
            for name in os.listdir("/etc/skel"):
                target = os.path.join(f["skel"], name)
                if os.path.isfile(os.path.join("/etc/skel", name)) and not os.path.exists(target):
                    shutil.copy2(os.path.join("/etc/skel", name), target)
                    os.chown(target, uid, gid)
        with open(f["path"], "wb") as out:
            out.write(data)
        os.chmod(f["path"], f["mode"])
        os.chown(f["path"], f.get("uid", 0), f.get("gid", 0))


def build_filesystem(spec, files):
    root = mount_root(spec)
    mount_system(root)
    pivot_into(root)
    if not spec.get("first_boot", True):
        for name in os.listdir("/tmp"):  # systemd-tmpfiles empties /tmp at boot (tmp.conf: D /tmp)
            path = os.path.join("/tmp", name)
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
    write_files(files)


PER_BOOT = "/var/lib/cloud/scripts/per-boot"
RUNNER = """#!/bin/bash
# the emulated VM's script runners, in cloud-init's order (scripts_per_boot, then scripts_user) with GCE's
# startup script last: each runs to its end, its output on the console
run() {  # WHAT PATH
    if head -c 13 "$2" | grep -q '^#cloud-config'; then echo "[vm] $1 is cloud-config: nothing to run"; return; fi
    chmod 700 "$2"
    if [ "$(head -c 2 "$2")" = "#!" ]; then "$2"; else bash "$2"; fi
    echo "[vm] $1 exited with status $?"
}
for script in %(per_boot)s/*; do
    [ -f "$script" ] && [ -x "$script" ] && run "per-boot script $script" "$script"
done
%(main)s
"""


def run_boot_scripts(spec, console):
    """The scripts a boot runs (RUNNER, as one process): cloud-init's per-boot scripts at every boot; EC2
    user data at the first boot only (cloud-init: once per instance); GCE's startup-script at every boot,
    from a fresh temporary directory as the guest agent writes it (google_metadata_script_runner), removed
    after it ran."""
    main = ""
    if spec.get("user_data") and spec.get("first_boot", True):
        main = f'run "user data script" {spec["user_data"]}'
    elif spec.get("startup_script_data") is not None:
        data = spec["startup_script_data"]
        directory = f"/tmp/metadata-scripts{os.getpid()}{int(time.time() * 1000) % 100000}"
        os.makedirs(directory, mode=0o700)
        with open(f"{directory}/startup-script", "wb") as f:
            f.write(data)
        main = f'run "startup script" {directory}/startup-script; rm -rf {directory}  # (the agent cleans up)'
    os.makedirs("/run/vm-init", exist_ok=True)
    with open("/run/vm-init/run-scripts", "w") as f:
        f.write(RUNNER % {"per_boot": PER_BOOT, "main": main})
    return subprocess.Popen(["bash", "/run/vm-init/run-scripts"], cwd="/", env={"PATH": PATH},
                            stdin=subprocess.DEVNULL, stdout=console, stderr=console, close_fds=True)


def other_processes():
    """The VM's processes but this init (its /proc shows its PID namespace only)."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def power_down(action, console, vm_dir_fd, reap):
    """What a machine does on `poweroff`/`halt`: every process stops, then the power goes (or the CPU
    halts); the marker tells the lab, whose watcher has the cloud stop or terminate the instance."""
    try:
        with open(REQUEST) as f:
            requested, command = (f.read().splitlines() + ["", ""])[:2]
        action = requested or action
    except OSError:
        command = f"signal {action}"
    os.write(console, f"[vm] {action} requested by `{command}`: stopping every process\n".encode())
    for sig, grace in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.kill(-1, sig)  # from a PID namespace's init: every process of the namespace but itself
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while other_processes() and time.monotonic() < deadline:
            reap()
            time.sleep(0.02)
        reap()
    os.write(console, b"[vm] reboot: " + (b"Power down\n" if action == "poweroff" else b"System halted\n"))
    marker = json.dumps({"action": action, "command": command, "time": time.time()}).encode()
    fd = os.open(MARKER + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=vm_dir_fd)
    os.write(fd, marker)
    os.close(fd)
    os.rename(MARKER + ".tmp", MARKER, src_dir_fd=vm_dir_fd, dst_dir_fd=vm_dir_fd)
    print(f"{action}: {command}")


def main():
    spec = json.load(open(sys.argv[1]))
    files = []
    for f in spec["files"]:
        with open(f["src"], "rb") as src:
            files.append((f, src.read()))
    if spec.get("startup_script"):  # read now: the host's files are out of reach once in the VM's root
        with open(spec["startup_script"], "rb") as src:
            spec["startup_script_data"] = src.read()
    console = os.open(spec["console_log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    sshd_log = os.open(spec["sshd_log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    init_log = os.open(spec["init_log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    vm_dir_fd = os.open(spec["vm_dir"], os.O_RDONLY | os.O_DIRECTORY)  # for the power marker
    try:
        build_filesystem(spec, files)
        socket.sethostname(spec["hostname"])
    except Exception:
        print(traceback.format_exc(), flush=True)
        sys.exit(1)
    # signals wake the loop through a pipe: SIGCHLD to reap, the power signals to power down. Handlers
    # are needed anyway: a PID namespace's init gets no signal it has not set a handler for
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for sig in (signal.SIGCHLD, *POWER_SIGNALS):
        signal.signal(sig, lambda *_: None)
    print("ready", flush=True)
    os.dup2(init_log, 1)
    os.dup2(init_log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1)
    os.write(console, f"[vm] {spec['hostname']} up, running its boot scripts\n".encode())
    boot = run_boot_scripts(spec, console)
    sshd, sshd_at = None, time.monotonic() + float(spec.get("sshd_delay_s") or 0)
    power = None  # "poweroff" or "halt" once requested

    def reap():
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if boot is not None and pid == boot.pid:
                boot.returncode = os.waitstatus_to_exitcode(status)
            elif sshd is not None and pid == sshd.pid:
                print(f"sshd exited: {os.waitstatus_to_exitcode(status)}")

    while True:
        if sshd is None and power is None and time.monotonic() >= sshd_at:
            sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", "/etc/ssh/sshd_config"],
                                    cwd="/", env={"PATH": PATH}, stdin=subprocess.DEVNULL,
                                    stdout=sshd_log, stderr=sshd_log)
            print(f"sshd started (pid {sshd.pid})")
        reap()
        timeout = max(0.0, sshd_at - time.monotonic()) if sshd is None and power is None else None
        select.select([wake_r], [], [], timeout)
        try:
            woken = os.read(wake_r, 4096)  # the numbers of the signals caught
        except BlockingIOError:
            woken = b""
        requested = [action for sig, action in POWER_SIGNALS.items() if sig in woken]
        if power is None and requested:
            power = requested[0]
            power_down(power, console, vm_dir_fd, reap)  # then idle: only the lab ends this VM


if __name__ == "__main__":
    main()
