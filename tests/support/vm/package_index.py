"""The lab's package index: real wheels, downloaded once, served to the VMs from the lab's bridge.

What it stands for, for a lab VM (which has no route off this machine):
- PyPI's simple API (PEP 503): http://BRIDGE:PORT/simple/ lists the projects, /simple/<name>/ the files,
  each link with `#sha256=<hex>` and `data-requires-python`, and the core metadata beside each wheel
  (PEP 658/714: `data-core-metadata` + `<file>.metadata`), as pypi.org serves them. It is what a
  corporate or air-gapped PyPI mirror serves, and what dlrun's `mirrors.pypi` setting names.
- torch's wheel index: http://BRIDGE:PORT/whl/<index>/ laid out like https://download.pytorch.org/whl/
  (/whl/cpu/, /whl/cpu/torch/, ...; what `mirrors.torch` names), listing torch and the packages its
  wheel depends on. The lab has no GPU: every index (cpu, cu126, cu128, cu130, ...) serves the same CPU
  wheel, where the real CUDA indexes serve CUDA builds of several GB.
The files are what pip downloads for CPython 3.11 on manylinux x86_64 (Debian 12's python3 is 3.11):
uv at the version dlrun's boot pins (its wheel carries uv's standalone binary), ray[default,train] at the client's Ray, torch's CPU
wheel at the client's torch, scikit-learn, numpy, pip, setuptools, wheel and the node storage clients
(infra/buckets.py NODE_CLIENTS at the client's versions), with all their dependencies: one consistent
set, so a VM resolves the same versions each time.
What it does not reproduce: the other files and versions PyPI has (a requirement outside this set
fails to resolve, as on a mirror that lacks it); torch on /simple/ (PyPI's torch is the CUDA build:
here a boot that takes torch from the PyPI index fails instead of fetching GBs); sdists; yanking.

Cache: <rootfs.cache_dir()>/wheels/<key>/ (key: the requirements, platform and Python), downloaded once
under a flock by `pip download --only-binary=:all:` with this machine's pip configuration (find-links
and extra indexes included: it is where this machine's torch CPU wheel comes from) plus torch's own CPU
index when it answers.
"""
from __future__ import annotations

import hashlib
import html
import http.server
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from . import lab_http
from .rootfs import cache_dir, key_of, locked

PYTHON_VERSION = "3.11"  # Debian 12's python3
# pip does not widen a --platform: every glibc level the VM's glibc (2.36) can run is named
PLATFORMS = tuple(f"manylinux_2_{n}_x86_64" for n in range(36, 4, -1)) + (
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DOWNLOAD_TIMEOUT_S = 1800
TORCH_INDEX_RE = re.compile(r"^(cpu|cu\d+|rocm[\d.]+|xpu)$")

download_log: list[dict] = []  # what this process downloaded: for the bench and reports


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(dist: str, default: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return default


def requirements() -> list[str]:
    """What a lab VM may install: what dlrun's boot asks for, at the versions the client runs."""
    from infra.buckets import NODE_CLIENTS
    from infra.vm.bootstrap import UV_VERSION  # the boot script pins uv's wheel (name and sha256)

    ray = _version("ray", "2.60.0")
    torch = _version("torch", "2.13.0").split("+")[0]
    clients = [f"{name}=={_version(name, '')}".rstrip("=") for name in sorted(NODE_CLIENTS.values())]
    return [f"uv=={UV_VERSION}", f"ray[default,train]=={ray}", f"torch=={torch}+cpu", "scikit-learn", "numpy", "pip",
            "setuptools", "wheel", *clients]


def _reachable(url: str, timeout: float = 5) -> bool:
    try:
        urllib.request.urlopen(url, timeout=timeout).close()
        return True
    except OSError:
        return False


def pypi_reachable() -> bool:
    return _reachable("https://pypi.org/simple/uv/")


def wheel_dir() -> Path:
    """The wheel cache for this client's requirements, downloaded now if missing."""
    inputs = {"requirements": requirements(), "python": PYTHON_VERSION, "platforms": list(PLATFORMS)}
    home = cache_dir() / "wheels"
    target = home / key_of(inputs)
    if (target / "index.json").exists():
        return target
    with locked(home / ".lock"):
        if (target / "index.json").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        tmp = home / f".downloading-{target.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        argv = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "-d", str(tmp),
                "--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp",
                "--abi", "cp" + PYTHON_VERSION.replace(".", "")]
        for platform in PLATFORMS:
            argv += ["--platform", platform]
        if _reachable(TORCH_CPU_INDEX + "/"):
            argv += ["--extra-index-url", TORCH_CPU_INDEX]
        started = time.monotonic()
        proc = subprocess.run(argv + inputs["requirements"], capture_output=True, text=True,
                              timeout=DOWNLOAD_TIMEOUT_S)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RuntimeError(f"pip download for the lab's index failed ({proc.returncode}):\n"
                               + "\n".join(line for line in proc.stderr.splitlines()
                                           if "is ignored" not in line)[-3000:])
        seconds = time.monotonic() - started
        files = build_index(tmp)
        size = sum(f["size"] for f in files)
        (tmp / "index.json").write_text(json.dumps({"inputs": inputs, "seconds": round(seconds, 1),
                                                    "bytes": size, "files": files}, indent=1))
        tmp.rename(target)
        download_log.append({"seconds": seconds, "bytes": size, "files": len(files), "path": str(target)})
        return target


# ------------------------------------------------------------------ metadata
def _wheel_metadata(path: Path) -> bytes:
    with zipfile.ZipFile(path) as zf:
        (name,) = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        return zf.read(name)


def _header(metadata: bytes, key: str) -> list[str]:
    values = []
    for line in metadata.decode("utf-8", "replace").split("\n\n", 1)[0].splitlines():
        if line.lower().startswith(key.lower() + ":"):
            values.append(line.split(":", 1)[1].strip())
    return values


def build_index(directory: Path) -> list[dict]:
    """Writes <wheel>.metadata beside each wheel; returns one record per wheel (name, hashes, ...)."""
    files = []
    for wheel in sorted(directory.glob("*.whl")):
        metadata = _wheel_metadata(wheel)
        (directory / (wheel.name + ".metadata")).write_bytes(metadata)
        files.append({"file": wheel.name, "project": normalize(_header(metadata, "Name")[0]),
                      "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(), "size": wheel.stat().st_size,
                      "metadata_sha256": hashlib.sha256(metadata).hexdigest(),
                      "requires_python": (_header(metadata, "Requires-Python") or [""])[0],
                      "requires_dist": _header(metadata, "Requires-Dist")})
    return files


def torch_closure(files: list[dict]) -> set[str]:
    """torch and every project its wheel needs on Linux x86_64 / CPython 3.11 (extras left out)."""
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = dict(default_environment(), sys_platform="linux", platform_system="Linux",
               platform_machine="x86_64", python_version=PYTHON_VERSION,
               python_full_version=PYTHON_VERSION + ".2", implementation_name="cpython",
               platform_python_implementation="CPython", os_name="posix", extra="")
    by_project: dict[str, list[dict]] = {}
    for f in files:
        by_project.setdefault(f["project"], []).append(f)
    todo, seen = ["torch"], set()
    while todo:
        project = todo.pop()
        if project in seen or project not in by_project:
            continue
        seen.add(project)
        for f in by_project[project]:
            for line in f["requires_dist"]:
                req = Requirement(line)
                if req.marker is None or req.marker.evaluate(env):
                    todo.append(normalize(req.name))
    return seen


# ------------------------------------------------------------------ serving
@dataclass
class PackageIndex:
    """Serves one wheel directory over HTTP from (host, port) in the root network namespace."""

    directory: Path
    host: str
    port: int = 0
    files: list[dict] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # "GET /path status" lines, for tests and debugging
    _server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> "PackageIndex":
        self.files = json.loads((self.directory / "index.json").read_text())["files"]
        self._torch = torch_closure(self.files)
        self._server = lab_http.serve(self.host, self.port, self.answer, self.requests, "lab-index")
        self.port = self._server.server_address[1]
        return self

    def stop(self) -> None:
        lab_http.stop(self._server)
        self._server = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def mirrors(self) -> dict[str, str]:
        """What dlrun's `mirrors:` setting takes: the PyPI mirror and the download.pytorch.org/whl mirror."""
        return {"pypi": f"{self.url}/simple", "torch": f"{self.url}/whl"}

    # -------------------------------------------------------------- pages
    def answer(self, path: str) -> lab_http.Answer:
        """(status, body, content type, file to send instead of body) for a GET of `path`."""
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "files":
            return self._file(parts[1])
        if parts[:1] == ["simple"] and len(parts) <= 2:
            return self._listing(parts[1:], lambda project: project != "torch", "/simple")
        if parts[:1] == ["whl"] and len(parts) >= 2 and TORCH_INDEX_RE.match(parts[1]):
            if len(parts) == 3 and parts[2].endswith((".whl", ".metadata")):  # files beside the index pages
                return self._file(parts[2])
            if len(parts) <= 3:
                return self._listing(parts[2:], lambda project: project in self._torch, f"/whl/{parts[1]}")
        return 404, b"Not Found\n", "text/plain", None

    def _file(self, name: str):
        known = {f["file"] for f in self.files}
        if name in known or (name.endswith(".metadata") and name[: -len(".metadata")] in known):
            return 200, b"", ("application/octet-stream" if name.endswith(".whl") else "text/plain"), \
                self.directory / name
        return 404, b"Not Found\n", "text/plain", None

    def _listing(self, rest: list[str], served, base: str):
        projects = sorted({f["project"] for f in self.files if served(f["project"])})
        if not rest:
            links = "".join(f'<a href="{base}/{p}/">{p}</a>\n' for p in projects)
            return 200, _page("Simple index", links), "text/html", None
        project = rest[0]
        if project != normalize(project):  # PEP 503: redirecting is allowed, a 404 is what pip then sees
            return 404, b"Not Found\n", "text/plain", None
        if project not in projects:
            return 404, b"Not Found\n", "text/plain", None
        links = []
        for f in (f for f in self.files if f["project"] == project):
            attrs = f' data-core-metadata="sha256={f["metadata_sha256"]}"' \
                    f' data-dist-info-metadata="sha256={f["metadata_sha256"]}"'
            if f["requires_python"]:
                attrs += f' data-requires-python="{html.escape(f["requires_python"])}"'
            links.append(f'<a href="/files/{quote(f["file"])}#sha256={f["sha256"]}"{attrs}>{f["file"]}</a>\n')
        return 200, _page(f"Links for {project}", "".join(links)), "text/html", None


def _page(title: str, body: str) -> bytes:
    return (f"<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.1\">"
            f"<title>{html.escape(title)}</title></head><body>\n<h1>{html.escape(title)}</h1>\n{body}"
            f"</body></html>\n").encode()
