"""The files that make one VM's identity: login user, SSH server config and host key, host name, boot script.

Why here and not in the VM: they are written on the host into the VM's directory (readable for
debugging, listed in SPEC.json), and vm_init.py writes them into the VM's root before anything else runs.
What they reproduce:
- the login user as the clouds make it at first boot: cloud-init's default user on AWS (`ubuntu`: a
  home with /etc/skel's files, groups adm and sudo, passwordless sudo through
  /etc/sudoers.d/90-cloud-init-users, the key pair's public key in ~/.ssh/authorized_keys), GCE's guest
  agent the user named in the ssh-keys metadata (the same, with groups adm and google-sudoers in reality:
  here sudo). The image's own /etc/passwd, group and shadow are the base (its system users, sshd's
  among them); the user gets a `*` password (no password login, not "locked", so sshd accepts its key
  without PAM).
- a fresh SSH host key per VM (cloud images make theirs at first boot) and an sshd_config for key login
  only (Ubuntu's cloud images: PasswordAuthentication no). Not reproduced: the user appearing late on
  GCE (the lab's sshd_delay_s stands for it), cloud-init's other modules.
"""
from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

from .image import Image

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


def add_to_groups(group: str, user: str, names: tuple[str, ...]) -> str:
    """/etc/group text with `user` added to the member lists of `names` (those that exist)."""
    lines = []
    for line in group.splitlines():
        fields = line.split(":")
        if len(fields) == 4 and fields[0] in names:
            members = [m for m in fields[3].split(",") if m]
            fields[3] = ",".join(members + [user])
        lines.append(":".join(fields))
    return "\n".join(lines) + "\n"


USER_DATA = "/var/lib/cloud/instance/scripts/part-001"  # where cloud-init keeps a user-data script


def vm_files(vm_dir: Path, image: Image, *, user: str, hostname: str, private_ip: str,
             authorized_keys: list[str], boot_script: bytes | None,
             runner: str = "cloud-init", extra_hosts: str = "") -> tuple[list[dict], str]:
    """Writes the VM's files into vm_dir/files; returns (SPEC 'files' entries, host public key)."""
    src = vm_dir / "files"
    src.mkdir()
    passwd = image.read("/etc/passwd")
    group = image.read("/etc/group")
    shadow = image.read("/etc/shadow")
    uid = free_id(passwd, group)
    home = f"/home/{user}"
    entries: list[dict] = []

    def add(path: str, data: bytes | str, mode: int = 0o644, uid_gid=(0, 0), dirs=(), skel=None) -> None:
        name = path.strip("/").replace("/", "_")
        (src / name).write_bytes(data.encode() if isinstance(data, str) else data)
        entries.append({"path": path, "src": str(src / name), "mode": mode, "uid": uid_gid[0],
                        "gid": uid_gid[1], "dirs": list(dirs), "skel": skel})

    add("/etc/passwd", passwd.rstrip("\n") + f"\n{user}:x:{uid}:{uid}:{user}:{home}:/bin/bash\n")
    add("/etc/group", add_to_groups(group, user, ("adm", "sudo")).rstrip("\n") + f"\n{user}:x:{uid}:\n")
    add("/etc/shadow", shadow.rstrip("\n") + f"\n{user}:*:19000:0:99999:7:::\n", 0o640)
    add("/etc/hostname", hostname + "\n")
    # Ray finds a node's address by resolving the host name when there is no default route
    add("/etc/hosts", f"127.0.0.1 localhost\n{private_ip} {hostname}\n{extra_hosts}")
    add("/etc/sudoers.d/90-cloud-init-users", f"{user} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    add("/etc/ssh/sshd_config", SSHD_CONFIG.format(user=user))
    public = host_key(src)
    entries.append({"path": "/etc/ssh/ssh_host_ed25519_key", "src": str(src / "ssh_host_ed25519_key"),
                    "mode": 0o600, "uid": 0, "gid": 0, "dirs": []})
    add("/etc/ssh/ssh_host_ed25519_key.pub", public + "\n")
    add(f"{home}/.ssh/authorized_keys", "".join(k.strip() + "\n" for k in authorized_keys), 0o600,
        (uid, uid), dirs=[(home, 0o750, uid, uid), (f"{home}/.ssh", 0o700, uid, uid)], skel=home)
    if boot_script is not None and runner == "cloud-init":
        # cloud-init decompresses gzip'd user-data before it looks at it (cloudinit/user_data.py: decomp_gzip;
        # docs "User data formats": "Content found to be gzip compressed will be uncompressed")
        if boot_script[:2] == b"\x1f\x8b":
            boot_script = gzip.decompress(boot_script)
        add(USER_DATA, boot_script, 0o700)
    elif boot_script is not None:  # GCE's guest agent fetches it from the metadata server at every boot
        (src / "startup-script").write_bytes(boot_script)
    return entries, public
