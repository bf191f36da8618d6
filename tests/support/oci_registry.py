"""A stand-in OCI registry: the part of the distribution API dlrun's image check speaks, as unkind as the real ones.

Reproduces (sources: the OCI distribution spec v1.1 "Pulling manifests" and "Error codes";
docs.docker.com/registry/spec/auth/token ("Token Authentication Specification"); distribution/distribution
registry/handlers/manifests.go; Docker Hub's observed behaviour as documented there):
- `GET /v2/` answers 401 with a challenge when the registry wants auth;
- auth="token" (Docker Hub, GHCR, nvcr.io): 401 + `WWW-Authenticate: Bearer realm="<this>/token",
  service="<service>",scope="repository:<name>:pull"`; the token endpoint takes Basic credentials (a wrong
  password: 401 `{"details": "incorrect username or password"}`) or none (an anonymous token that can pull
  only public repositories); a token without pull access to a repository is refused as Docker Hub refuses
  it, 401 UNAUTHORIZED "authentication required" with `error="insufficient_scope"`, for a private
  repository *and* for one that does not exist (Hub does not tell them apart);
- auth="basic" (a self-hosted `registry:2` with htpasswd): 401 + `WWW-Authenticate: Basic realm=...`;
  wrong credentials: 401 UNAUTHORIZED;
- manifests by tag and by digest, with `Docker-Content-Digest` and the media type as Content-Type; an OCI
  index whose entries carry `platform`, plus BuildKit's attestation entry (`unknown/unknown`) that a client
  must skip; an index requested without its type in Accept is 404 MANIFEST_UNKNOWN, as distribution
  answers ("OCI index found, but accept header does not support OCI indexes");
- 404 with the spec's error JSON: MANIFEST_UNKNOWN for a tag or digest, NAME_UNKNOWN for a repository (on
  an anonymous registry);
- plain HTTP only (a test that needs TLS refusal points a non-loopback name at it);
- every request is recorded (method, path, whether it carried Authorization) for the tests to count.
Does not reproduce: blobs (nothing is pulled), pushes, HEAD, pagination, rate limits (429), token expiry,
schema-1 manifests, refresh tokens / OAuth2 POST to the token endpoint, TLS.
"""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from tests.support.http import LocalHttpServer, QuietHandler

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass
class Repo:
    public: bool = True
    manifests: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # digest -> (media type, body)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    authorized: bool
    authorization: str  # the header as sent (tests check a secret never lands elsewhere)


class OciRegistry(LocalHttpServer):
    def __init__(self, auth: str = "none", users: dict[str, str] | None = None, host: str = "127.0.0.1",
                 service: str = "registry.test"):
        super().__init__(QuietHandler)
        self.auth, self.users, self.host, self.service = auth, dict(users or {}), host, service
        self.repos: dict[str, Repo] = {}
        self.requests: list[Request] = []
        self._tokens: dict[str, str | None] = {}  # token -> user (None: anonymous)
        self._lock = threading.Lock()

    # --- content ---------------------------------------------------------------------------------
    def _put(self, name: str, media_type: str, doc: dict, public: bool) -> str:
        body = json.dumps(doc, separators=(",", ":")).encode()
        digest = _digest(body)
        repo = self.repos.setdefault(name, Repo(public=public))
        repo.public = public
        repo.manifests[digest] = (media_type, body)
        return digest

    def add_image(self, name: str, tag: str, platforms: dict[str, list[int]], *, public: bool = True,
                  index: bool = True, docker_types: bool = False) -> dict[str, str]:
        """An image whose linux/<arch> builds have layers of these compressed sizes; with index=True (as
        BuildKit pushes) an index over them with an attestation entry. Returns {platform|'index': digest}."""
        out = {}
        entries = []
        for plat, sizes in platforms.items():
            os_, arch = plat.split("/")
            config = json.dumps({"architecture": arch, "os": os_}).encode()
            doc = {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST if docker_types else OCI_MANIFEST,
                   "config": {"mediaType": OCI_CONFIG, "digest": _digest(config), "size": len(config)},
                   "layers": [{"mediaType": OCI_LAYER, "digest": _digest(f"{name}{plat}{i}".encode()), "size": n}
                              for i, n in enumerate(sizes)]}
            kind = DOCKER_MANIFEST if docker_types else OCI_MANIFEST
            digest = self._put(name, kind, doc, public)
            out[plat] = digest
            entries.append({"mediaType": kind, "digest": digest, "size": 0,
                            "platform": {"architecture": arch, "os": os_}})
        if index:
            attestation = self._put(name, OCI_MANIFEST, {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                                                         "layers": []}, public)
            entries.append({"mediaType": OCI_MANIFEST, "digest": attestation, "size": 0,
                            "platform": {"architecture": "unknown", "os": "unknown"},
                            "annotations": {"vnd.docker.reference.type": "attestation-manifest"}})
            digest = self._put(name, OCI_INDEX, {"schemaVersion": 2, "mediaType": OCI_INDEX,
                                                 "manifests": entries}, public)
            out["index"] = digest
        else:
            digest = next(iter(out.values()))
        self.repos[name].tags[tag] = digest
        return out

    def manifest_requests(self) -> list[Request]:
        return [r for r in self.requests if "/manifests/" in r.path]

    # --- the server ------------------------------------------------------------------------------
    def start(self):
        self._server = ThreadingHTTPServer((self.host, 0), self.make_handler())
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": self.poll_interval_s},
                         daemon=True).start()
        return self

    @property
    def address(self) -> str:
        """host:port as an image reference names it."""
        return f"{self.host}:{self.port}"

    def make_handler(self):
        registry = self

        class Handler(QuietHandler):
            def _json(self, status: int, doc: dict, headers: dict | None = None):
                self.reply(status, json.dumps(doc).encode(), "application/json", headers)

            def _error(self, status: int, code: str, message: str, headers: dict | None = None, detail=None):
                self._json(status, {"errors": [{"code": code, "message": message, "detail": detail}]}, headers)

            def _basic_user(self) -> str | None | bool:
                """The user of valid Basic credentials; None without any; False for wrong ones."""
                header = self.headers.get("Authorization", "")
                if not header.startswith("Basic "):
                    return None
                try:
                    user, _, password = base64.b64decode(header[6:]).decode().partition(":")
                except ValueError:
                    return False
                return user if registry.users.get(user) == password and password else False

            def _challenge(self, name: str | None) -> dict:
                if registry.auth == "basic":
                    return {"WWW-Authenticate": 'Basic realm="Registry Realm"'}
                scope = f',scope="repository:{name}:pull"' if name else ""
                realm = f"http://{registry.address}/token"
                return {"WWW-Authenticate": f'Bearer realm="{realm}",service="{registry.service}"{scope}'}

            def _may_pull(self, name: str) -> tuple[bool, str]:
                """(allowed, the error's extra) for the request's Authorization."""
                repo = registry.repos.get(name)
                if registry.auth == "none":
                    return True, ""
                if registry.auth == "basic":
                    return self._basic_user() not in (None, False), ""
                header = self.headers.get("Authorization", "")
                if not header.startswith("Bearer ") or header[7:] not in registry._tokens:
                    return False, ""
                user = registry._tokens[header[7:]]
                if repo is None or (not repo.public and user is None):
                    return False, "insufficient_scope"
                return True, ""

            def do_GET(self):
                url = urlparse(self.path)
                auth = self.headers.get("Authorization", "")
                with registry._lock:
                    registry.requests.append(Request("GET", url.path, bool(auth), auth))
                if url.path == "/token" and registry.auth == "token":
                    return self._token(parse_qs(url.query))
                if url.path in ("/v2", "/v2/"):
                    if registry.auth != "none" and not self._may_pull_any():
                        return self._error(401, "UNAUTHORIZED", "authentication required", self._challenge(None))
                    return self._json(200, {})
                if url.path.startswith("/v2/") and "/manifests/" in url.path:
                    name, _, ref = url.path[4:].rpartition("/manifests/")
                    return self._manifest(name, ref)
                self._error(404, "NOT_FOUND", "not found")

            def _may_pull_any(self) -> bool:
                if registry.auth == "basic":
                    return self._basic_user() not in (None, False)
                header = self.headers.get("Authorization", "")
                return header.startswith("Bearer ") and header[7:] in registry._tokens

            def _token(self, query):
                user = self._basic_user()
                if user is False:
                    return self._json(401, {"details": "incorrect username or password"})
                token = secrets.token_hex(16)
                registry._tokens[token] = user
                self._json(200, {"token": token, "access_token": token, "expires_in": 300})

            def _manifest(self, name: str, ref: str):
                allowed, why = self._may_pull(name)
                if not allowed:
                    headers = self._challenge(name)
                    if why and registry.auth == "token":
                        headers["WWW-Authenticate"] += f',error="{why}"'
                    detail = [{"Type": "repository", "Class": "", "Name": name, "Action": "pull"}]
                    return self._error(401, "UNAUTHORIZED", "authentication required", headers, detail)
                repo = registry.repos.get(name)
                if repo is None:
                    return self._error(404, "NAME_UNKNOWN", "repository name not known to registry",
                                       detail={"name": name})
                digest = ref if ref.startswith("sha256:") else repo.tags.get(ref)
                if digest is None or digest not in repo.manifests:
                    return self._error(404, "MANIFEST_UNKNOWN", "manifest unknown", detail={"Tag": ref})
                media_type, body = repo.manifests[digest]
                accept = self.headers.get("Accept", "")
                if media_type == OCI_INDEX and OCI_INDEX not in accept:
                    return self._error(404, "MANIFEST_UNKNOWN", "OCI index found, but accept header does not "
                                       "support OCI indexes")
                self.reply(200, body, media_type, {"Docker-Content-Digest": digest})

        return Handler
