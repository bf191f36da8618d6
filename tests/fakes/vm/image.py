"""The VM "image": what a deep-learning VM image has pre-installed, made from this test run's own venv.

Why: a boot script that does `python3 -m venv --system-site-packages /opt/dlrun/venv && pip install
'ray[default,train]==2.60.0' torch ...` must be satisfied offline, as on an image with those packages, and
must not modify anything outside its VM. So, inside a VM (see vm_init.py):

- /usr/local is an overlay whose lower layers are, top first: console scripts built here, the relocated
  interpreter executable (see relocated_python), and the installation of the interpreter running these
  tests (sys.base_prefix: pyenv's 3.11.7). So python3 is /usr/local/bin/python3 with prefix /usr/local,
  as after `make install`, and a venv made from it finds its standard library (a venv's `home` is
  /usr/local/bin: the prefix is searched from there, not from a symlink's target);
- /usr/local/lib/python3.X/site-packages is an overlay whose only lower layer is this venv's
  site-packages: the test venv's packages (ray, torch, numpy, scikit-learn, ...) are pre-installed;
- the upper layers are the VM's private tmpfs, so `pip install` as root writes into the VM only;
- the project under test is not there: every editable install of the venv (its .pth, finder, dist-info
  and console scripts) is removed from that view, and the project's checkout is hidden: the job code
  reaches a VM only through Ray's working_dir, as on a real VM;
- /usr/local/sbin (first on a VM's PATH) holds the VM's own shutdown, poweroff, halt, reboot and
  systemctl, which ask the VM's init to power off, never the host (see power.py);
- /etc/pip.conf says no-index: nothing is ever downloaded, a missing requirement fails as on a broken boot;
  its find-links is a wheelhouse of the venv's pip and setuptools (see wheels.py).
"""
from __future__ import annotations

import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from .power import install_commands as install_power_commands
from .wheels import build_wheelhouse

WHEELHOUSE = "/usr/local/share/python-wheels"
PIP_CONF = f"[global]\nno-index = true\nfind-links = {WHEELHOUSE}\ndisable-pip-version-check = true\n"
VM_PYTHON = "/usr/local/bin/python3"


@dataclass(frozen=True)
class Image:
    python_root: str  # the interpreter's installation on the host; a lower layer of the VM's /usr/local
    python_bin: str  # its real executable (also runs the VM's init)
    python_patch: str  # a layer over python_root holding the relocated executable ("" if none needed)
    site_packages_rel: str  # lib/python3.X/site-packages: relative to /usr/local in a VM
    venv_site_packages: str  # the read-only lower layer of that site-packages
    hidden: tuple[str, ...]  # names in venv_site_packages that belong to editable installs
    usr_local: str  # the built top layer of /usr/local (console scripts)
    project_root: str  # hidden inside VMs

    def spec(self) -> dict:
        return dict(self.__dict__, hidden=list(self.hidden))


def project_root() -> Path:
    return Path(__file__).resolve().parents[3]


def editable_installs(site_packages: Path) -> tuple[set[str], set[str]]:
    """(names in site-packages, console script names) that the venv's editable installs put there."""
    names, scripts = set(), set()
    for dist in site_packages.glob("*.dist-info"):
        try:
            editable = json.loads((dist / "direct_url.json").read_text())["dir_info"].get("editable")
        except (OSError, ValueError, KeyError):
            continue
        if not editable:
            continue
        names.add(dist.name)
        for line in (dist / "RECORD").read_text().splitlines():
            path = line.rsplit(",", 2)[0]
            if path.startswith("../../../bin/"):
                scripts.add(path.rsplit("/", 1)[1])
            elif path and not path.startswith(".."):
                names.add(path.split("/")[0] if not path.startswith("__pycache__/") else path)
    return names, scripts


def _write_console_scripts(bin_dir: Path, python: Path, dest: Path, skip: set[str]) -> None:
    """Copies the python console scripts of bin_dir with their interpreter set to the VM's python3."""
    pythons = sorted({str(bin_dir / "python3"), str(bin_dir / "python"), str(python)}, key=len, reverse=True)
    for src in sorted(bin_dir.iterdir()):
        if src.name in skip or src.name.startswith(("python", "activate", "Activate")) or not src.is_file():
            continue
        try:
            text = src.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binaries (py-spy, ...) are not python console scripts
        head, sep, rest = text.partition("\n")
        if not head.startswith("#!") or not any(p in text[:400] for p in pythons):
            continue
        for p in pythons:
            head = head.replace(p, VM_PYTHON)
            rest = rest.replace(f"'{p}'", f"'{VM_PYTHON}'").replace(f'"{p}"', f'"{VM_PYTHON}"')
        target = dest / src.name
        target.write_text(head + sep + rest)
        target.chmod(0o755)


def relocated_python(python_bin: Path, python_root: Path, dest: Path) -> bool:
    """Writes dest/bin/<python> with its RUNPATH set to $ORIGIN/../lib, in place, as `chrpath -r` does.

    Why: pyenv links the executable to libpython through the absolute RUNPATH <python_root>/lib, which
    is under /root (mode 700) and so unusable for the VM's login user; without it the loader would pick
    Debian's libpython3.11 from the system, a different Python. False if there is nothing to patch.
    """
    data = python_bin.read_bytes()
    old, new = str(python_root / "lib").encode() + b"\0", b"$ORIGIN/../lib"
    if data.count(old) != 1 or len(new) >= len(old):
        return False
    (dest / "bin").mkdir(parents=True)
    target = dest / "bin" / python_bin.name
    target.write_bytes(data.replace(old, new.ljust(len(old), b"\0")))
    target.chmod(0o755)
    return True


def build_image(dest: Path) -> Image:
    """Builds the image's own layers under `dest` and describes the rest."""
    python_root = Path(sys.base_prefix)
    python_bin = Path(os.path.realpath(sys.executable))
    site_packages = Path(sysconfig.get_paths()["purelib"])
    hidden, scripts = editable_installs(site_packages)

    usr_local = dest / "usr-local"
    (usr_local / "bin").mkdir(parents=True)
    patched = relocated_python(python_bin, python_root, dest / "python-patch")
    # the interpreter's own scripts (pip3, idle, ...), then the venv's over them (ray, torchrun, ...)
    _write_console_scripts(python_root / "bin", python_bin, usr_local / "bin", set())
    _write_console_scripts(Path(sys.prefix) / "bin", python_bin, usr_local / "bin", scripts)
    build_wheelhouse(site_packages, usr_local / WHEELHOUSE[len("/usr/local/"):])
    install_power_commands(usr_local / "sbin")  # shutdown, poweroff, halt, ...: see power.py
    return Image(python_root=str(python_root), python_bin=str(python_bin),
                 python_patch=str(dest / "python-patch") if patched else "",
                 site_packages_rel=str(site_packages.relative_to(sys.prefix)),
                 venv_site_packages=str(site_packages), hidden=tuple(sorted(hidden)),
                 usr_local=str(usr_local), project_root=str(project_root()))
