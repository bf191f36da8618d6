"""The boot script's install phase for real, in a real stock Debian 12 root file system, against a local
package index: python3 without `venv`/`ensurepip` and without pip gets uv from the index (the real uv
wheel, checked against the pinned sha256), a venv, and a real package installed into it.

The root is the lab's stock image (tests/support/vm/rootfs.py: `mmdebstrap --variant=minbase` + python3,
ca-certificates, iproute2, procps, curl, sudo, openssh-server, built once per machine), the stand-in for
Canonical's Ubuntu cloud images: Debian's python3 split exactly as Ubuntu's (no ensurepip, no pip), no
ML packages. Each run gets the root under an
overlay (the cached root is never written) in its own mount and PID namespaces, chrooted, with `env -i` as
cloud-init runs user-data; it shares this machine's network, so the index is a PEP 503 directory served on
127.0.0.1 (real wheels downloaded once from PyPI into ~/.cache/dlrun-lab/wheels). What it does not
reproduce: Ubuntu's python3.10 (Debian 12 has 3.11), cloud-init and systemd, a network off this machine
(the index is the only one the script is given, as with a mirror in an air-gapped VPC).
Skipped with the reason when not root, without mmdebstrap/unshare/overlayfs, or when PyPI is unreachable
for the one-time wheel download.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.base import BootstrapConfig
from infra.vm.bootstrap import UV_VERSION, UV_WHEELS, install_phase, prologue
from tests.support.http import LocalHttpServer
from tests.support.vm.rootfs import cache_dir
from tests.support.vm.rootfs import stock_root as lab_stock_root

CACHE = cache_dir()  # the lab's cache: one stock root and one wheel store for both
PACKAGE = ("six", "1.17.0")  # one small real package (pure Python, no dependencies)


def _problem() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mount and PID namespaces, overlayfs, chroot)"
    for tool in ("mmdebstrap", "unshare", "chroot"):
        if not shutil.which(tool):
            return f"needs {tool} (apt-get install -y mmdebstrap util-linux coreutils)"
    probe = subprocess.run(["unshare", "--mount", "--pid", "--fork", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make mount/PID namespaces here: {probe.stderr.strip()}"
    return None


def stock_root() -> Path:
    try:
        return lab_stock_root()
    except RuntimeError as e:  # mmdebstrap missing or failing: say why
        pytest.skip(f"the lab's stock root could not be built: {str(e)[-500:]}")


def _wheels() -> dict[str, Path]:
    """{project: wheel} of uv (this machine's arch) and PACKAGE, downloaded from PyPI once."""
    arch = os.uname().machine
    if arch not in UV_WHEELS:
        pytest.skip(f"dlrun pins no uv wheel for {arch}")
    uv_name, _ = UV_WHEELS[arch]
    store = CACHE / "wheels"
    store.mkdir(parents=True, exist_ok=True)
    want = {"uv": store / uv_name, PACKAGE[0]: store / f"{PACKAGE[0]}-{PACKAGE[1]}-py2.py3-none-any.whl"}
    if not all(p.exists() for p in want.values()):
        plat = uv_name.split("-py3-none-")[1].removesuffix(".whl").split(".")[0]
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                               "--platform", plat, "-d", str(store), f"uv=={UV_VERSION}", "==".join(PACKAGE)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0 or not all(p.exists() for p in want.values()):
            pytest.skip(f"could not download the test wheels from PyPI: {proc.stderr[-300:]}")
    return want


def write_index(root: Path, wheels: dict, *, sha256_of=None, path: str = "simple") -> None:
    """A PEP 503 index at root/PATH/PROJECT/ (each project: a wheel or a list of wheels) whose links carry
    #sha256= fragments (as PyPI's do); the files at root/files/. `sha256_of` may override what a link claims."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    for project, files in wheels.items():
        links = []
        for wheel in files if isinstance(files, list) else [files]:
            target = root / "files" / wheel.name
            if not target.exists():
                shutil.copy(wheel, target)
            digest = (sha256_of or {}).get(project) or hashlib.sha256(wheel.read_bytes()).hexdigest()
            links.append(f'<a href="/files/{wheel.name}#sha256={digest}">{wheel.name}</a><br>')
        page = root / path / project
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>{''.join(links)}</body></html>\n")


@contextlib.contextmanager
def serve(directory: Path):
    """The directory over HTTP on 127.0.0.1 (a thread of this process); yields the base URL."""
    with LocalHttpServer(functools.partial(StaticFiles, directory=str(directory))) as server:
        yield server.endpoint


class StaticFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def run_in_root(root: Path, work: Path, script: str, after: str = "", timeout: int = 180,
                path: str = "/boot.sh"):
    """`script` as cloud-init runs user-data (root, `env -i`, cwd /, from `path`) in the stock root under an
    overlay, then `after` (a shell command) in the same root; returns (rc of script, output of after, seconds)."""
    for d in ("upper", "work", "merged"):
        (work / d).mkdir(parents=True, exist_ok=True)
    (work / "upper" / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (work / "upper" / path.lstrip("/")).write_text(script)
    inner = "\n".join([
        "set -e",
        f"mount -t overlay overlay -o lowerdir={shlex.quote(str(root))},upperdir={work}/upper,"
        f"workdir={work}/work {work}/merged",
        f"mount -t proc proc {work}/merged/proc",
        f"mount --rbind /dev {work}/merged/dev",
        "set +e",
        "start=$(date +%s.%N)",
        f"chroot {work}/merged /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
        f"/bin/bash -c 'cd / && exec bash {path}' > {work}/boot.out 2>&1",
        "rc=$?",
        "end=$(date +%s.%N)",
        f"echo $rc $start $end > {work}/rc",
        f"chroot {work}/merged /usr/bin/env -i PATH=/usr/bin:/bin /bin/bash -c {shlex.quote(after or 'true')} "
        f"> {work}/after.out 2>&1 || true",
    ])
    subprocess.run(["unshare", "--mount", "--pid", "--fork", "--kill-child", "bash", "-c", inner],
                   timeout=timeout, check=False)
    rc, start, end = (work / "rc").read_text().split()
    return int(rc), (work / "after.out").read_text(), float(end) - float(start)


@pytest.fixture(scope="module")
def stock():
    problem = _problem()
    if problem:
        pytest.skip(problem)
    return stock_root(), _wheels()


def install_script(cfg: BootstrapConfig, packages: list[str]) -> str:
    return "\n".join([prologue(), *install_phase(cfg, packages), 'echo "install phase done"', ""])


def test_python3_without_venv_gets_a_venv_with_the_package_from_the_index(stock, tmp_path):
    root, wheels = stock
    write_index(tmp_path / "index", wheels)
    with serve(tmp_path / "index") as base:
        cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=f"{base}/simple")
        check = ("python3 -m venv /tmp/v >/dev/null 2>&1 && echo image-has-venv; "
                 "python3 -m pip --version >/dev/null 2>&1 && echo image-has-pip; "
                 "/var/lib/dlrun/venv/bin/python -c 'import six, sys; print(six.__version__, sys.prefix)'; "
                 "cat /var/lib/dlrun/failed 2>/dev/null")
        rc, after, seconds = run_in_root(root, tmp_path, install_script(cfg, ["==".join(PACKAGE)]), check)
    log = (tmp_path / "upper" / "var/lib/dlrun/boot.log").read_text()
    assert rc == 0, log
    print(f"\ninstall phase on the stock root: {seconds:.1f} s (uv {UV_VERSION} fetched, venv, {'=='.join(PACKAGE)})")
    assert "image-has-venv" not in after and "image-has-pip" not in after  # the image is as stock as it was
    assert after.strip() == f"{PACKAGE[1]} /var/lib/dlrun/venv", after
    assert "install phase done" in log and f"uv {UV_VERSION}: {base}/files/" in log


def test_an_unreachable_index_is_named_in_the_failed_marker(stock, tmp_path):
    root, _ = stock
    cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url="http://127.0.0.1:9/simple")
    rc, after, seconds = run_in_root(root, tmp_path, install_script(cfg, ["six"]), "cat /var/lib/dlrun/failed")
    assert rc != 0
    assert after.startswith("package index unreachable: http://127.0.0.1:9/simple/uv/ ("), after
    assert seconds < 20  # retried with backoff (1 + 2 + 4 s), then reported


def test_a_wheel_whose_hash_differs_from_the_pin_is_refused(stock, tmp_path):
    root, wheels = stock
    write_index(tmp_path / "index", wheels, sha256_of={"uv": "0" * 64})
    with serve(tmp_path / "index") as base:
        cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=f"{base}/simple/")
        rc, after, _ = run_in_root(root, tmp_path, install_script(cfg, ["six"]), "cat /var/lib/dlrun/failed; "
                                   "ls /var/lib/dlrun/bin 2>/dev/null")
    assert rc != 0 and after.startswith(f"hash mismatch: {base}/simple/uv/ lists uv-{UV_VERSION}-"), after
    assert "uv\n" not in after  # nothing was extracted


def test_a_package_the_index_lacks_is_named(stock, tmp_path):
    root, wheels = stock
    write_index(tmp_path / "index", wheels)
    with serve(tmp_path / "index") as base:
        cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=f"{base}/simple")
        rc, after, _ = run_in_root(root, tmp_path, install_script(cfg, ["six", "no-such-package==1.0"]),
                                   "cat /var/lib/dlrun/failed")
    assert rc != 0
    assert after.strip() == f"package no-such-package not found on {base}/simple (installing six no-such-package==1.0)", after


def make_wheel(directory: Path, name: str, version: str, *, requires=(), marker: str = "") -> Path:
    """A minimal pure-Python wheel: package `name` whose __init__ says `marker`, with Requires-Dist lines."""
    import base64
    import zipfile

    dist = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{name.replace('-', '_')}/__init__.py": f"BUILD = {marker!r}\n",
        f"{dist}.dist-info/METADATA": "Metadata-Version: 2.1\n"
                                      f"Name: {name}\nVersion: {version}\n"
                                      + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: dlrun-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(data.encode())}\n" for path, data in files.items()) + f"{dist}.dist-info/RECORD,,\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in {**files, f"{dist}.dist-info/RECORD": record}.items():
            zf.writestr(path, data)
    return wheel


def test_torch_from_its_index_stays_when_later_packages_need_torch(stock, tmp_path):
    """The planned torch build (a local version, `+cpu`, as download.pytorch.org names it) comes from the
    torch index even though PyPI has the same version; a dependency that only PyPI has comes from PyPI (a
    torch mirror holding torch's wheels alone works); a later package that requires torch keeps that build,
    and one that requires another torch fails the boot with the conflict (the constraint) instead of
    replacing the planned build with PyPI's. The torch wheels here are stand-ins (a module saying which
    build it is), so this shows uv's index order and the constraint, not torch."""
    root, wheels = stock
    made = tmp_path / "made"
    pypi = {"uv": wheels["uv"], "six": wheels["six"],
            "torch": [make_wheel(made / "pypi", "torch", "2.13.0", marker="pypi"),  # and a newer one
                      make_wheel(made / "pypi", "torch", "2.14.0", marker="pypi")],
            "needs-torch": make_wheel(made / "pypi", "needs-torch", "1.0", requires=["torch>=2"], marker="job"),
            "needs-newer-torch": make_wheel(made / "pypi", "needs-newer-torch", "1.0", requires=["torch>=2.14"])}
    write_index(tmp_path / "index", pypi)
    torch_cpu = make_wheel(made / "cpu", "torch", "2.13.0+cpu", requires=["six"], marker="cpu")
    write_index(tmp_path / "index", {"torch": torch_cpu}, path="whl/cpu")  # as download.pytorch.org/whl/cpu
    with serve(tmp_path / "index") as base:
        cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=f"{base}/simple",
                              torch_requirement="torch==2.13.0", torch_index_url=f"{base}/whl/cpu")
        check = ("/var/lib/dlrun/venv/bin/python -c 'import importlib.metadata as m, torch, six, needs_torch; "
                 "print(m.version(\"torch\"), torch.BUILD, needs_torch.BUILD)'")
        rc, after, seconds = run_in_root(root, tmp_path, install_script(cfg, ["needs-torch==1.0"]), check)
    log = (tmp_path / "upper" / "var/lib/dlrun/boot.log").read_text()
    assert rc == 0, log
    assert after.strip() == "2.13.0+cpu cpu job", after + log

    with serve(tmp_path / "index") as base:
        cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=f"{base}/simple",
                              torch_requirement="torch==2.13.0", torch_index_url=f"{base}/whl/cpu")
        rc, after, _ = run_in_root(root, tmp_path / "newer", install_script(cfg, ["needs-newer-torch==1.0"]),
                                   "cat /var/lib/dlrun/failed; /var/lib/dlrun/venv/bin/python -c "
                                   "'import importlib.metadata as m; print(m.version(\"torch\"))'")
    assert rc != 0
    assert after.startswith(f"could not install needs-newer-torch==1.0 from {base}/simple: "), after
    assert "torch==2.13.0" in after and after.strip().endswith("2.13.0+cpu"), after  # the planned build stays


def test_run_as_ec2_user_data_it_also_runs_at_every_later_boot(stock, tmp_path):
    """cloud-init runs user-data once per instance, from /var/lib/cloud/instance/scripts/part-001: the script
    copies itself into cloud-init's per-boot scripts, so that a rebooted EC2 node runs it again (and
    rejoins with its token, see test_bootstrap.py); run from anywhere else (GCE's runner), it does not."""
    root, wheels = stock
    write_index(tmp_path / "index", wheels)
    with serve(tmp_path / "index") as base:
        script = install_script(BootstrapConfig(ray_version="2.60.0", pip_index_url=f"{base}/simple"), ["six"])
        rc, after, _ = run_in_root(root, tmp_path / "ec2", script, "ls /var/lib/cloud/scripts/per-boot/",
                                   path="/var/lib/cloud/instance/scripts/part-001")
        assert rc == 0 and after == "dlrun-boot.sh\n", after
        assert (tmp_path / "ec2/upper/var/lib/cloud/scripts/per-boot/dlrun-boot.sh").read_text() == script
        rc, after, _ = run_in_root(root, tmp_path / "gce", script, "ls /var/lib/cloud/scripts/per-boot/ 2>&1",
                                   path="/tmp/startup-script-123")
        assert rc == 0 and "No such file" in after, after
