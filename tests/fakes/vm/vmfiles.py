"""The files that make one VM's identity: login user, SSH server, host name, pip config, boot script.

Why here and not in the VM: they are written on the host into the VM's directory (readable for
debugging, listed in SPEC.json), and vm_init.py copies them into the VM's private /etc, /home and /var
before anything else runs. The host's own /etc/passwd, group and shadow are the base, so system users
(sshd's privilege separation user among them) exist as on the host; the login user is added with a
`*` password (no password login, not "locked", so sshd accepts its key without PAM).
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from .image import PIP_CONF

SSHD_CONFIG = """\
# the emulated VM's sshd: key login for {user} only, as on a cloud image
Port 22
ListenAddress 0.0.0.0
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile none
UsePAM no
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
AllowTcpForwarding yes
StrictModes yes
UseDNS no
PrintMotd no
PrintLastLog no
MaxStartups 100:30:200
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def free_id(*tables: str, start: int = 1000) -> int:
    """The first uid/gid >= start used in none of the given passwd/group texts."""
    used = {int(line.split(":")[2]) for text in tables for line in text.splitlines() if line.count(":") >= 2}
    n = start
    while n in used:
        n += 1
    return n


def host_key(directory: Path) -> str:
    """Generates a fresh ed25519 host key in `directory`; returns the public key line."""
    key = directory / "ssh_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(key)],
                   check=True, capture_output=True, timeout=30)
    return (directory / "ssh_host_ed25519_key.pub").read_text().strip()


def vm_files(vm_dir: Path, *, user: str, hostname: str, private_ip: str, authorized_keys: list[str],
             boot_script: bytes | None, extra_hosts: str = "") -> tuple[list[dict], str]:
    """Writes the VM's files into vm_dir/files; returns (SPEC 'files' entries, host public key)."""
    src = vm_dir / "files"
    src.mkdir()
    passwd = Path("/etc/passwd").read_text()
    group = Path("/etc/group").read_text()
    shadow = Path("/etc/shadow").read_text()
    uid = free_id(passwd, group)
    home = f"/home/{user}"
    entries: list[dict] = []

    def add(path: str, data: bytes | str, mode: int = 0o644, uid_gid=(0, 0), dirs=()) -> None:
        name = path.strip("/").replace("/", "_")
        (src / name).write_bytes(data.encode() if isinstance(data, str) else data)
        entries.append({"path": path, "src": str(src / name), "mode": mode, "uid": uid_gid[0],
                        "gid": uid_gid[1], "dirs": list(dirs)})

    add("/etc/passwd", passwd.rstrip("\n") + f"\n{user}:x:{uid}:{uid}:{user}:{home}:/bin/bash\n")
    add("/etc/group", group.rstrip("\n") + f"\n{user}:x:{uid}:\n")
    add("/etc/shadow", shadow.rstrip("\n") + f"\n{user}:*:19000:0:99999:7:::\n", 0o640)
    add("/etc/hostname", hostname + "\n")
    # Ray finds a node's address by resolving the host name when there is no default route
    add("/etc/hosts", f"127.0.0.1 localhost\n{private_ip} {hostname}\n{extra_hosts}")
    add("/etc/pip.conf", PIP_CONF)
    add("/etc/sudoers.d/90-cloud-users", f"{user} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    add("/etc/ssh/sshd_config", SSHD_CONFIG.format(user=user))
    public = host_key(src)
    entries.append({"path": "/etc/ssh/ssh_host_ed25519_key", "src": str(src / "ssh_host_ed25519_key"),
                    "mode": 0o600, "uid": 0, "gid": 0, "dirs": []})
    add("/etc/ssh/ssh_host_ed25519_key.pub", public + "\n")
    add(f"{home}/.ssh/authorized_keys", "".join(k.strip() + "\n" for k in authorized_keys), 0o600,
        (uid, uid), dirs=[(home, 0o755, uid, uid), (f"{home}/.ssh", 0o700, uid, uid)])
    if boot_script is not None:
        add("/var/lib/cloud/instance/scripts/part-001", boot_script, 0o700)
    return entries, public
