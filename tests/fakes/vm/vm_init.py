"""PID 1 of an emulated VM: builds the VM's private filesystem view, then runs the boot script and sshd.

Started by machine.Vm as `ip netns exec NS unshare --mount --pid --uts --fork --mount-proc ... python -I -S
vm_init.py SPEC.json`, so it already sits in the VM's network namespace and in fresh mount, PID and UTS
namespaces (mount propagation private: nothing mounted here is seen by the host). Standard library only:
it runs with -I -S, before the VM has any site-packages, and imports everything first (its own
standard library is hidden under the VM's /root once the filesystem is built).

Why each mount (none is visible outside the VM, all vanish with it):
- tmpfs on SPEC.vm_dir/layer holds every writable layer, so killing the VM frees its whole disk;
- overlays on /etc, /var, /usr/local (the interpreter) and its site-packages (see image.py): writable
  in the VM, read-only underneath; fresh tmpfs on /tmp, /home, /root, /run, /opt, /dev/shm,
  /var/lib/dlrun, as on a fresh VM (Ray's /tmp/ray and plasma store in /dev/shm are the VM's own);
- the project checkout is covered by an empty read-only tmpfs; then / itself is remounted read-only in
  this namespace, so a boot script can never write into the host's filesystem.
It prints "ready" on stdout once done (or a traceback, then exits 1), then logs to SPEC.init_log.

Power-off (see power.py, whose names are repeated here: this script imports nothing of the harness): like
systemd, the init takes SIGRTMIN+4 as "power off" and SIGRTMIN+3 as "halt" (the VM's shutdown, poweroff,
halt and systemctl send them, with the request in REQUEST); it then stops every other process of the VM,
writes "reboot: Power down" to the console and the marker SPEC.vm_dir/MARKER for the lab, and idles.
"""
import ctypes
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
POWER_SIGNALS = {signal.SIGRTMIN + 4: "poweroff", signal.SIGRTMIN + 3: "halt"}  # systemd's
MARKER, REQUEST, GRACE_S = "power", "/run/vm-power/request", 2.0  # as in power.py
HOST_MOUNT_POINTS = ("/etc", "/var", "/usr/local", "/tmp", "/home", "/root", "/run", "/opt", "/dev/shm")
_libc = ctypes.CDLL(None, use_errno=True)


def mount(source, target, fstype, flags=0, data=""):
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                   flags, data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or 'bind'} {source} on {target} ({data}): {os.strerror(err)}")


def tmpfs(target, mode="755", flags=MS_NOSUID | MS_NODEV):
    mount("vmtmp", target, "tmpfs", flags, f"mode={mode}")


def overlay(target, lower, layer, name):
    upper, work = f"{layer}/{name}.upper", f"{layer}/{name}.work"
    os.makedirs(upper)
    os.makedirs(work)
    mount("vmlayer", target, "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")


def remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def build_filesystem(spec, files):
    image, layer = spec["image"], spec["vm_dir"] + "/layer"
    # mount points are never created: until / is read-only, that would write into the host's filesystem
    missing = [p for p in HOST_MOUNT_POINTS if not os.path.isdir(p)]
    if missing:
        raise RuntimeError(f"the host lacks {missing}: cannot cover them with the VM's own")
    tmpfs(layer)
    # bind every lower layer into the VM's layer first: some of them are about to be hidden
    lowers = {"etc": "/etc", "var": "/var", "scripts": image["usr_local"], "patch": image["python_patch"],
              "python": image["python_root"], "sp": image["venv_site_packages"]}
    for name, path in list(lowers.items()):
        if not path:
            del lowers[name]
            continue
        lowers[name] = f"{layer}/lower/{name}"
        os.makedirs(lowers[name])
        mount(path, lowers[name], None, MS_BIND)
    overlay("/etc", lowers["etc"], layer, "etc")
    overlay("/var", lowers["var"], layer, "var")
    overlay("/usr/local", ":".join(lowers[k] for k in ("scripts", "patch", "python") if k in lowers),
            layer, "usrlocal")
    site_packages = os.path.join("/usr/local", image["site_packages_rel"])
    overlay(site_packages, lowers["sp"], layer, "sp")
    for name in image["hidden"]:
        remove(os.path.join(site_packages, name))
    os.makedirs("/var/lib/dlrun", exist_ok=True)  # in the VM's /var
    for target, mode in (("/home", "755"), ("/root", "700"), ("/run", "755"), ("/opt", "755"),
                         ("/dev/shm", "1777"), ("/var/lib/dlrun", "755")):
        tmpfs(target, mode)
    os.makedirs("/run/sshd", mode=0o755)
    if os.path.isdir(image["project_root"]):
        mount("vmhidden", image["project_root"], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "mode=755")
    for name in os.listdir("/etc/ssh"):
        if name.startswith("ssh_host_"):
            os.remove(os.path.join("/etc/ssh", name))  # the host's keys are not the VM's
    for f, data in files:
        os.makedirs(os.path.dirname(f["path"]), exist_ok=True)
        for d in f.get("dirs", []):  # (path, mode, uid, gid) of directories to create with owners
            os.makedirs(d[0], exist_ok=True)
            os.chmod(d[0], d[1])
            os.chown(d[0], d[2], d[3])
        with open(f["path"], "wb") as out:
            out.write(data)
        os.chmod(f["path"], f["mode"])
        os.chown(f["path"], f.get("uid", 0), f.get("gid", 0))
    tmpfs("/tmp", "1777")  # last: it hides the layers (under the lab's directory in /tmp)
    mount("none", "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def run_boot_script(path, console):
    with open(path, "rb") as f:
        head = f.readline()
    if head.startswith(b"#cloud-config"):
        os.write(console, b"[vm] user data is cloud-config: nothing to run\n")
        return None
    argv = [path] if head.startswith(b"#!") else ["bash", path]
    return subprocess.Popen(argv, cwd="/", env={"PATH": PATH}, stdin=subprocess.DEVNULL,
                            stdout=console, stderr=console, close_fds=True)


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
    # the logs are written through a bind mount of the VM's directory, not through the host's root
    # mount: a mount with open writers cannot be made read-only (EBUSY) and / is made so at the end
    mount(spec["vm_dir"], spec["vm_dir"], None, MS_BIND)
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
    os.write(console, f"[vm] {spec['hostname']} up, running user data\n".encode())
    boot = run_boot_script(spec["boot_script"], console) if spec.get("boot_script") else None
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
                code = os.waitstatus_to_exitcode(status)
                os.write(console, f"[vm] user data script exited with status {code}\n".encode())
                boot.returncode = code
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
