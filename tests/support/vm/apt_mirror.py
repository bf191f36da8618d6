"""The lab's Debian mirror: deb.debian.org's own signed index and the .debs of podman's closure, on the bridge.

What it stands for: a Debian mirror a VM's apt reaches (what dlrun's `mirrors.apt` setting names, used as
`deb <URL> <codename> main`): deb.debian.org itself, a cloud's mirror (cdn-aws.deb.debian.org,
*.clouds.archive.ubuntu.com for Ubuntu) or an air-gapped site's. Served at http://BRIDGE:PORT/debian with a
real mirror's layout (https://wiki.debian.org/DebianRepository/Format):
- dists/bookworm/InRelease, byte for byte as deb.debian.org serves it: signed by Debian's archive keys, so a
  VM's apt verifies it with the image's own debian-archive-keyring, as with a real mirror (no
  `[trusted=yes]`, no key of the lab's);
- dists/bookworm/main/binary-amd64/Packages.xz and main/i18n/Translation-en.xz, the real ones (every
  package of Debian 12 main, with the sizes and hashes the InRelease vouches for), also under
  by-hash/SHA256/<hex> (the InRelease says `Acquire-By-Hash: yes`: apt asks for that path). A missing
  Translation-en fails `apt-get update` (exit 100, the lists not taken), as it would on a real mirror;
- pool/main/...: the .deb files apt takes from deb.debian.org for any of INSTALLS (podman, with or without
  its Recommends, with or without runc) on the lab's stock image (rootfs.py), resolved by apt itself
  against that image's dpkg status; each verified against the SHA256 the Packages index gives.
What it does not reproduce: the rest of the pool. A package the index lists but the pool lacks fails as on a
partial or broken mirror (`apt-get install` reports `404  Not Found` for the .deb: "E: Failed to fetch
.../pool/..."). Not served either: the other index files the InRelease lists (other Translation-*, Contents-*,
other architectures, DEP-11: the Debian images' apt does not ask for them). No other suites
(bookworm-updates, bookworm-security), no HTTPS, no Ubuntu archive (the lab's images are Debian 12).

Cache: <rootfs.cache_dir()>/apt/<key>/ (key: suite, mirror, packages, the stock image), fetched once under a
flock; the InRelease and Packages.xz are fetched together, so the pool matches the index even when
deb.debian.org moves on (a point release): the lab's mirror is a snapshot, as a mirror synced once is.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import lzma
import shutil
import subprocess
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from . import lab_http
from .rootfs import MIRROR, SUITE, cache_dir, key_of, locked, stock_inputs, stock_root

RECIPE = 2
ARCH = "amd64"
# what the lab's VMs can install from the mirror: each `apt-get install` line's closure on the stock image
# (podman alone takes crun, podman with runc does not; with recommends it takes buildah, slirp4netns, ...)
INSTALLS = (("podman",), ("podman", "runc"), ("--no-install-recommends", "podman"),
            ("--no-install-recommends", "podman", "runc"))
PACKAGES_XZ = f"main/binary-{ARCH}/Packages.xz"
INDEXES = (PACKAGES_XZ, "main/i18n/Translation-en.xz")  # what apt fetches for `deb URL bookworm main`
FETCH_TIMEOUT_S = 300

fetch_log: list[dict] = []  # what this process fetched (seconds, bytes): for the bench and reports


def _fetch(url: str, dest: Path, sha256: str | None = None) -> int:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:
        data = response.read()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(f"{url}: its SHA256 is not the one the index gives ({sha256})")
    dest.write_bytes(data)
    return len(data)


def debian_reachable() -> bool:
    try:
        urllib.request.urlopen(f"{MIRROR}/dists/{SUITE}/InRelease", timeout=5).close()
        return True
    except OSError:
        return False


def release_sha256(in_release: str, path: str) -> tuple[str, int]:
    """(sha256, size) of `path` (relative to dists/<suite>/) in an InRelease's SHA256 list."""
    in_sha256 = False
    for line in in_release.splitlines():
        if not line.startswith(" "):
            in_sha256 = line.startswith("SHA256:")
            continue
        parts = line.split()
        if in_sha256 and len(parts) == 3 and parts[2] == path:
            return parts[0], int(parts[1])
    raise RuntimeError(f"the InRelease lists no {path}")


def pool_sha256(packages_xz: Path) -> dict[str, str]:
    """Filename -> SHA256 of every package a Packages.xz lists."""
    found = {}
    for stanza in lzma.decompress(packages_xz.read_bytes()).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " ")
        if "Filename" in fields and "SHA256" in fields:
            found[fields["Filename"]] = fields["SHA256"]
    return found


def mirror_inputs() -> dict:
    return {"suite": SUITE, "mirror": MIRROR, "arch": ARCH, "installs": [list(i) for i in INSTALLS], "recipe": RECIPE,
            "stock": key_of(stock_inputs())}


def resolve(mirror: Path, root: Path, work: Path) -> list[tuple[str, str]]:
    """(pool path, sha256) of each .deb apt installs for any of INSTALLS on `root` from the mirror in `mirror`:
    the host's apt with the image's dpkg status and keyring, so the closure is what the VM's apt will ask for."""
    for d in ("lists/partial", "cache/archives/partial"):
        (work / d).mkdir(parents=True, exist_ok=True)
    keyring = work / "debian-archive-keyring.gpg"
    shutil.copy(root / "usr/share/keyrings/debian-archive-keyring.gpg", keyring)
    (work / "sources.list").write_text(f"deb [signed-by={keyring}] file:{mirror} {SUITE} main\n")
    options = [f"Dir::State::status={root}/var/lib/dpkg/status", f"Dir::State::Lists={work}/lists",
               f"Dir::Cache={work}/cache", f"Dir::Etc::SourceList={work}/sources.list",
               "Dir::Etc::SourceParts=/dev/null",
               "Dir::Etc::Preferences=/dev/null", "Dir::Etc::PreferencesParts=/dev/null", "Debug::NoLocking=1",
               f"APT::Architecture={ARCH}", f"APT::Architectures={ARCH}", "APT::Sandbox::User=root"]
    argv = ["apt-get", "-q"] + [x for o in options for x in ("-o", o)]
    printed = ""
    for command in (["update"], *(["install", "-y", "--print-uris", *i] for i in INSTALLS)):
        proc = subprocess.run(argv + command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        if proc.returncode != 0 or "W: " in proc.stderr:
            raise RuntimeError(f"apt-get {' '.join(command)} for the lab's mirror failed ({proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        printed += proc.stdout
    sha256 = pool_sha256(mirror / "dists" / SUITE / PACKAGES_XZ)  # (apt prints a file: source's MD5 only)
    debs = {}
    for line in printed.splitlines():
        if line.startswith("'"):
            path = unquote(urlparse(line.split()[0].strip("'")).path)[len(str(mirror)) + 1:]
            debs[path] = sha256[path]
    if not any("/podman_" in p for p in debs):
        raise RuntimeError(f"apt would install no podman from the lab's mirror: {printed[-2000:]}")
    return sorted(debs.items())


def mirror_dir() -> Path:
    """The mirror's directory (dists/ and pool/), fetched now if the cache lacks it."""
    inputs = mirror_inputs()
    home = cache_dir() / "apt"
    target = home / key_of(inputs)
    if (target / "mirror.json").exists():
        return target
    root = stock_root()  # (its own lock: taken before ours)
    with locked(home / ".lock"):
        if (target / "mirror.json").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)
        tmp = home / f".fetching-{target.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        started = time.monotonic()
        dists = tmp / "dists" / SUITE
        size = _fetch(f"{MIRROR}/dists/{SUITE}/InRelease", dists / "InRelease")
        for index in INDEXES:
            sha256, _ = release_sha256((dists / "InRelease").read_text(), index)
            size += _fetch(f"{MIRROR}/dists/{SUITE}/{index}", dists / index, sha256)
            by_hash = dists / Path(index).parent / "by-hash" / "SHA256" / sha256
            by_hash.parent.mkdir(parents=True)
            by_hash.hardlink_to(dists / index)
        debs = resolve(tmp, root, home / f".resolving-{target.name}")
        shutil.rmtree(home / f".resolving-{target.name}", ignore_errors=True)
        with ThreadPoolExecutor(8) as pool:
            size += sum(pool.map(lambda d: _fetch(f"{MIRROR}/{d[0]}", tmp / d[0], d[1]), debs))
        seconds = time.monotonic() - started
        (tmp / "mirror.json").write_text(json.dumps({"inputs": inputs, "seconds": round(seconds, 1), "bytes": size,
                                                     "debs": [p for p, _ in debs]}, indent=1))
        tmp.rename(target)
        fetch_log.append({"seconds": seconds, "bytes": size, "debs": len(debs), "path": str(target)})
        return target


@dataclass
class AptMirror:
    """Serves a mirror directory at http://HOST:PORT/debian/ from the root network namespace (the bridge)."""

    directory: Path
    host: str
    port: int = 0
    requests: list[str] = field(default_factory=list)  # "GET /path status" lines, for tests and debugging
    _server: http.server.ThreadingHTTPServer | None = None

    def start(self) -> "AptMirror":
        self._server = lab_http.serve(self.host, self.port, self.answer, self.requests, "lab-apt")
        self.port = self._server.server_address[1]
        return self

    def answer(self, path: str) -> lab_http.Answer:
        """A file of the mirror's tree under /debian/ (not its own mirror.json), else 404 as a mirror answers."""
        base = self.directory.resolve()
        target = (base / path.removeprefix("/debian/")).resolve()
        if path.startswith("/debian/") and target.is_file() and target.is_relative_to(base) \
                and target.name != "mirror.json":
            return 200, b"", "application/octet-stream", target
        return 404, b"Not Found\n", "text/plain", None

    def stop(self) -> None:
        lab_http.stop(self._server)
        self._server = None

    @property
    def url(self) -> str:
        """What `mirrors.apt` takes: the mirror's base, used as `deb <url> bookworm main`."""
        return f"http://{self.host}:{self.port}/debian"
