"""The lab's OCI registries on the bridge: Debian's own docker-registry (distribution 2.8) serving oci_images.py.

What it stands for: the registry a job's `image:` names (Docker Hub, ghcr.io, a team's self-hosted
registry), as a VM reaches it: over the network, at an address that is not localhost. It is the real
registry program (Debian's `docker-registry` package, github.com/distribution/distribution v2.8), so the
distribution API is the real one: `GET /v2/`, manifests by tag and digest with `Docker-Content-Digest`,
blobs, the error JSON (MANIFEST_UNKNOWN, NAME_UNKNOWN, UNAUTHORIZED), content negotiation of OCI indexes.
- `host` ("BRIDGE:PORT"): the public registry, no auth: dlrun-lab/python, dlrun-lab/nopython,
  dlrun-lab/arm64only, dlrun-lab/ray-torch (tag bookworm).
- `private_host`: a second registry behind basic auth (its htpasswd file: distribution's `auth.htpasswd`,
  bcrypt only), holding private/python:bookworm; `username`/`password` are its one account. A request
  without them gets 401 with `WWW-Authenticate: Basic realm="dlrun-lab"`, as a self-hosted `registry:2` with
  htpasswd answers (podman: "authentication required"). One registry per auth setting because
  docker-registry's htpasswd guards a whole registry, not a repository.
- Plain HTTP only, as a registry without TLS: podman refuses it unless told (`--tls-verify=false`, or
  `insecure = true` for it in registries.conf; dlrun: DLRUN_INSECURE_REGISTRIES), as for any registry not
  on localhost. Read-only (storage.maintenance.readonly): pushes are refused (405 UNSUPPORTED), the cached
  storage stays as built.
What it does not reproduce: token auth (Docker Hub, GHCR, nvcr.io: Bearer tokens from a realm; the stand-in
tests/support/oci_registry.py has that), TLS, rate limits (429), Docker Hub's name rewriting (`python` ->
library/python), mirrors and pull-through caches.
The registry processes die with the test process (setpriv --pdeathsig) and are stopped at lab close.
"""
from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .oci_images import IMAGES, storage_dir

USERNAME = "dlrun-lab"
PASSWORD = "lab-registry-pw"
# bcrypt of PASSWORD, cost 5 (Python's crypt.crypt(PASSWORD, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=32)));
# a low cost because the registry checks it on every request of a pull
PASSWORD_BCRYPT = "$2b$05$QbM4Fnguyo27t4yt4a3xZO204b/LAPlrPP2gQRnyXEhWWB8Wn59/m"
REALM = "dlrun-lab"
START_TIMEOUT_S = 20
CONFIG = """version: 0.1
log:
  level: warn
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: {root}
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: true
  cache:
    blobdescriptor: inmemory
http:
  addr: {addr}
{auth}"""
AUTH = """auth:
  htpasswd:
    realm: {realm}
    path: {path}
"""


def registry_problem() -> str | None:
    if not shutil.which("docker-registry"):
        return "the VM lab's OCI registry is Debian's docker-registry: apt-get install -y docker-registry"
    return None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class LabRegistry:
    """Two docker-registry processes on `host` (the bridge address), over oci_images.storage_dir()."""

    directory: Path  # where its config and logs go (the lab's directory)
    bind: str
    host: str = ""  # "BRIDGE:PORT" of the public registry
    private_host: str = ""  # "BRIDGE:PORT" of the one behind basic auth
    username: str = USERNAME
    password: str = PASSWORD
    _procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self) -> "LabRegistry":
        problem = registry_problem()
        if problem:
            raise RuntimeError(problem)
        storage = storage_dir()
        self.directory.mkdir(parents=True, exist_ok=True)
        htpasswd = self.directory / "htpasswd"
        htpasswd.write_text(f"{USERNAME}:{PASSWORD_BCRYPT}\n")
        for tree in ("public", "private"):
            addr = f"{self.bind}:{_free_port(self.bind)}"
            auth = AUTH.format(realm=REALM, path=htpasswd) if tree == "private" else ""
            config = self.directory / f"{tree}.yml"
            config.write_text(CONFIG.format(root=storage / tree, addr=addr, auth=auth))
            with open(self.directory / f"{tree}.log", "ab") as log:
                self._procs.append(subprocess.Popen(
                    ["setpriv", "--pdeathsig", "KILL", "docker-registry", "serve", str(config)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True))
            if tree == "public":
                self.host = addr
            else:
                self.private_host = addr
        for addr in (self.host, self.private_host):
            self._wait(addr)
        return self

    def _wait(self, addr: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                urllib.request.urlopen(f"http://{addr}/v2/", timeout=2).close()
                return
            except urllib.error.HTTPError:  # 401 from the private one: it answers
                return
            except OSError as e:
                if time.monotonic() > deadline or any(p.poll() is not None for p in self._procs):
                    logs = "".join((self.directory / f"{t}.log").read_text(errors="replace")[-1500:]
                                   for t in ("public", "private"))
                    self.stop()
                    raise RuntimeError(f"the lab's registry at {addr} did not answer:\n{logs}") from e
                time.sleep(0.05)

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        self._procs.clear()

    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.poll() is None]

    def image(self, name: str) -> str:
        """The full reference of one of oci_images.IMAGES ("dlrun-lab/python:bookworm" -> "BRIDGE:PORT/...")."""
        if name not in IMAGES:
            raise KeyError(f"the lab's registry has no {name} (it has {', '.join(IMAGES)})")
        return f"{self.private_host if IMAGES[name] == 'private' else self.host}/{name}"

    def auth_json(self) -> str:
        """A containers-auth.json(5) holding the private registry's credentials (podman --authfile)."""
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return json.dumps({"auths": {self.private_host: {"auth": token}}})
