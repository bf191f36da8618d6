"""A small OCI distribution client: an image's manifest for one platform and its compressed size.

What it speaks (the OCI distribution spec, docs.docker.com/registry/spec/auth/token):
- GET /v2/<name>/manifests/<tag or digest> with the Accept types of an OCI index, a Docker manifest list
  and the single manifests of both; an index is resolved to its linux/<arch> entry, fetched by digest;
- a 401 with `WWW-Authenticate: Bearer realm=...,service=...,scope=...`: a token from the realm (with the
  user's credential as Basic auth when there is one, anonymously otherwise), then the request again with
  it; `WWW-Authenticate: Basic`: the request again with the credential;
- errors as the spec's JSON ({"errors": [{"code": "MANIFEST_UNKNOWN", ...}]}).
Transport as docker and podman: HTTPS; a registry on localhost / a loopback address, or one listed in
DLRUN_INSECURE_REGISTRIES, is tried over HTTPS and then plain HTTP.
Never in a message: a credential, a token, an Authorization header.
"""
from __future__ import annotations

import hashlib
import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from infra.images.credentials import Credential, CredentialsProblem, credential_for
from infra.images.reference import ImageRef, is_local_registry

INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
ACCEPT = ", ".join(INDEX_TYPES + MANIFEST_TYPES)
INSECURE_ENV = "DLRUN_INSECURE_REGISTRIES"
TIMEOUT_S = 15.0
CACHE_S = 300.0  # a manifest looked up this recently is not asked again (one plan asks once per image)
NOT_FOUND_CODES = {"MANIFEST_UNKNOWN", "NAME_UNKNOWN", "BLOB_UNKNOWN", "NOT_FOUND"}
ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class ImageError(Exception):
    """What is wrong with an image, in one line naming it and what to do. kind: not_found | platform |
    auth | insecure | unreachable | bad_response."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


@dataclass(frozen=True)
class ImageFacts:
    ref: ImageRef
    arch: str              # the platform resolved: linux/<arch>
    digest: str            # the platform's manifest digest
    compressed_bytes: int  # the layers' sizes as the manifest states them (what a pull downloads)
    layers: int
    platforms: tuple[str, ...]  # what an index offers (os/arch), () for a single manifest


def insecure_registries() -> set[str]:
    return {h.strip().lower() for h in os.environ.get(INSECURE_ENV, "").split(",") if h.strip()}


def plain_http_allowed(ref: ImageRef) -> bool:
    """Whether the registry may answer plain HTTP: localhost, or listed in DLRUN_INSECURE_REGISTRIES."""
    listed = insecure_registries()
    return is_local_registry(ref.api_host.lower()) or ref.api_host.lower() in listed or ref.registry.lower() in listed


def node_arch(machine: str) -> str:
    """The OCI architecture of a machine (`uname -m`)."""
    return ARCHES.get(machine.lower(), machine.lower())


class _Response:
    def __init__(self, status: int, headers, body: bytes):
        self.status, self.headers, self.body = status, headers, body


class RegistryClient:
    def __init__(self, ref: ImageRef, credential: Credential | None = None, *, timeout: float = TIMEOUT_S):
        self.ref, self.credential, self.timeout = ref, credential, timeout
        self.plain_allowed = plain_http_allowed(ref)
        self.scheme = "https"
        self._auth: str | None = None  # the Authorization value that worked (never printed)

    # --- transport -------------------------------------------------------------------------------
    def _open(self, url: str, headers: dict[str, str]) -> _Response:
        req = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return _Response(resp.status, resp.headers, resp.read())
        except urllib.error.HTTPError as e:
            body = e.read() if e.fp else b""
            return _Response(e.code, e.headers, body)

    def _get(self, path: str, headers: dict[str, str]) -> _Response:
        url = f"{self.scheme}://{self.ref.api_host}{path}"
        try:
            return self._open(url, headers)
        except (urllib.error.URLError, ssl.SSLError, OSError) as e:
            reason = getattr(e, "reason", e)
            if self.scheme == "https" and isinstance(reason, ssl.SSLError):
                if self.plain_allowed:
                    self.scheme = "http"
                    return self._get(path, headers)
                raise ImageError("insecure", f"image {self.ref}: {self.ref.api_host} does not answer HTTPS "
                                 f"({type(reason).__name__}); dlrun, like docker and podman, uses plain HTTP only "
                                 f"for localhost or a registry listed in {INSECURE_ENV} (comma-separated "
                                 "host:port): add it there if you trust the network to it") from None
            if self.scheme == "https" and self.plain_allowed and isinstance(reason, ConnectionResetError):
                self.scheme = "http"
                return self._get(path, headers)
            raise ImageError("unreachable", f"image {self.ref}: registry {self.ref.api_host} cannot be reached "
                             f"({_why(reason)}); check the network or the registry's address") from None

    # --- auth ------------------------------------------------------------------------------------
    def _authorised_get(self, path: str, accept: str) -> _Response:
        headers = {"Accept": accept, "User-Agent": "dlrun"}
        if self._auth:
            headers["Authorization"] = self._auth
        resp = self._get(path, headers)
        if resp.status != 401 or self._auth:
            return resp
        challenge = resp.headers.get("WWW-Authenticate", "")
        scheme, params = _parse_challenge(challenge)
        if scheme == "bearer":
            self._auth = "Bearer " + self._token(params)
        elif scheme == "basic":
            if self.credential is None:
                raise ImageError("auth", f"image {self.ref}: {self.ref.registry} wants a login; log in with "
                                 f"`podman login {self.ref.registry}` (or docker login)")
            self._auth = self.credential.basic()
        else:
            return resp
        headers["Authorization"] = self._auth
        return self._get(path, headers)

    def _token(self, params: dict[str, str]) -> str:
        realm = params.get("realm")
        if not realm:
            raise ImageError("bad_response", f"image {self.ref}: {self.ref.registry} asked for a token without "
                             "saying where to get it (no realm in WWW-Authenticate)")
        query = {k: params[k] for k in ("service",) if k in params}
        query["scope"] = params.get("scope") or f"repository:{self.ref.repository}:pull"
        url = realm + ("&" if "?" in realm else "?") + urllib.parse.urlencode(query)
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme != "https" and not (is_local_registry(parsed.netloc) or
                                             parsed.netloc.lower() in insecure_registries()):
            raise ImageError("insecure", f"image {self.ref}: {self.ref.registry}'s token service {parsed.netloc} "
                             f"is plain HTTP; list it in {INSECURE_ENV} if you trust the network to it")
        headers = {"User-Agent": "dlrun"}
        if self.credential is not None:
            headers["Authorization"] = self.credential.basic()
        try:
            resp = self._open(url, headers)
        except (urllib.error.URLError, OSError) as e:
            raise ImageError("unreachable", f"image {self.ref}: the token service {parsed.netloc} cannot be "
                             f"reached ({_why(getattr(e, 'reason', e))})") from None
        if resp.status in (401, 403):
            raise ImageError("auth", f"image {self.ref}: {self.ref.registry} refused the credentials "
                             f"{_source(self.credential)}; log in again (`podman login {self.ref.registry}` "
                             "or docker login)")
        try:
            data = json.loads(resp.body)
            token = data.get("token") or data.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if resp.status != 200 or not token:
            raise ImageError("bad_response", f"image {self.ref}: the token service {parsed.netloc} answered "
                             f"HTTP {resp.status} without a token")
        return str(token)

    # --- manifests -------------------------------------------------------------------------------
    def _manifest(self, reference: str) -> tuple[str, dict, str]:
        resp = self._authorised_get(f"/v2/{self.ref.repository}/manifests/{reference}", ACCEPT)
        if resp.status == 200:
            try:
                doc = json.loads(resp.body)
            except ValueError:
                raise ImageError("bad_response", f"image {self.ref}: the registry's manifest is not JSON") from None
            kind = (resp.headers.get("Content-Type") or "").split(";")[0].strip() or doc.get("mediaType", "")
            digest = resp.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(resp.body).hexdigest()
            return kind, doc, digest
        codes = _error_codes(resp.body)
        if resp.status == 404 or codes & NOT_FOUND_CODES:
            what = "digest" if reference.startswith("sha256:") else "tag"
            missing = "repository" if "NAME_UNKNOWN" in codes else what
            raise ImageError("not_found", f"image {self.ref}: {self.ref.registry} has no such {missing} "
                             f"({', '.join(sorted(codes)) or 'HTTP 404'}); check the name and {what}")
        if resp.status in (401, 403):
            if self.credential is None:
                raise ImageError("auth", f"image {self.ref}: {self.ref.registry} refused anonymous access "
                                 f"({', '.join(sorted(codes)) or f'HTTP {resp.status}'}): the image does not exist "
                                 f"or needs a login; check the name, or `podman login {self.ref.registry}` "
                                 "(or docker login)")
            raise ImageError("auth", f"image {self.ref}: {self.ref.registry} refused the credentials "
                             f"{_source(self.credential)} ({', '.join(sorted(codes)) or f'HTTP {resp.status}'}); "
                             f"check the name, or log in again (`podman login {self.ref.registry}`)")
        if resp.status == 429:
            raise ImageError("unreachable", f"image {self.ref}: {self.ref.registry} is rate-limiting this "
                             "address (HTTP 429, TOOMANYREQUESTS); try again later or log in for a higher limit")
        raise ImageError("unreachable" if resp.status >= 500 else "bad_response",
                         f"image {self.ref}: {self.ref.registry} answered HTTP {resp.status} "
                         f"{', '.join(sorted(codes))}".rstrip())

    def resolve(self, arch: str) -> ImageFacts:
        """The image's manifest for linux/<arch> (an index resolved to that entry) and its size."""
        kind, doc, digest = self._manifest(self.ref.reference)
        platforms: tuple[str, ...] = ()
        if kind in INDEX_TYPES or "manifests" in doc:
            entries = [m for m in doc.get("manifests") or [] if isinstance(m, dict)]
            platforms = tuple(sorted({f"{p.get('os')}/{p.get('architecture')}" for m in entries
                                      if (p := m.get("platform") or {}) and p.get("os") != "unknown"}))
            match = next((m for m in entries if (m.get("platform") or {}).get("os") == "linux"
                          and (m.get("platform") or {}).get("architecture") == arch), None)
            if match is None:
                raise ImageError("platform", f"image {self.ref} has no linux/{arch} build (it has: "
                                 f"{', '.join(platforms) or 'none'}); use a tag built for linux/{arch} "
                                 "or a multi-platform image")
            digest = match["digest"]
            kind, doc, _ = self._manifest(digest)
        elif kind not in MANIFEST_TYPES and doc.get("schemaVersion") != 2:
            raise ImageError("bad_response", f"image {self.ref}: manifest type {kind or 'unknown'} is not one "
                             "dlrun reads (OCI or Docker schema 2); push it with a current docker or podman")
        layers = [x for x in doc.get("layers") or [] if isinstance(x, dict)]
        return ImageFacts(ref=self.ref, arch=arch, digest=digest, layers=len(layers), platforms=platforms,
                          compressed_bytes=sum(int(x.get("size") or 0) for x in layers))


def _parse_challenge(value: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = value.strip().partition(" ")
    params: dict[str, str] = {}
    key, buf, quoted, i = "", "", False, 0
    current = rest
    # key="value",key2="value, with comma"
    while i < len(current):
        c = current[i]
        if c == '"':
            quoted = not quoted
        elif c == "=" and not quoted and not key:
            key, buf = buf.strip(), ""
        elif c == "," and not quoted:
            if key:
                params[key.lower()] = buf.strip()
            key, buf = "", ""
        else:
            buf += c
        i += 1
    if key:
        params[key.lower()] = buf.strip()
    return scheme.lower(), params


def _error_codes(body: bytes) -> set[str]:
    try:
        return {str(e.get("code")) for e in json.loads(body).get("errors") or [] if isinstance(e, dict)}
    except (ValueError, AttributeError):
        return set()


def _why(reason) -> str:
    return str(getattr(reason, "strerror", None) or type(reason).__name__)


def _source(credential: Credential | None) -> str:
    return f"from {credential.source}" if credential else "(none given)"


_cache: dict[tuple[str, str], tuple[float, ImageFacts]] = {}


def image_facts(ref: ImageRef, arch: str, *, fresh: bool = False) -> ImageFacts:
    """The image's facts for linux/<arch>, asked at most once per CACHE_S (per process); ImageError."""
    key = (ref.full, arch)
    hit = _cache.get(key)
    if hit and not fresh and time.monotonic() - hit[0] < CACHE_S:
        return hit[1]
    try:
        credential = credential_for(ref.registry, ref.repository)
    except CredentialsProblem as e:
        raise ImageError("auth", f"image {ref}: {e}") from None
    facts = RegistryClient(ref, credential).resolve(arch)
    _cache[key] = (time.monotonic(), facts)
    return facts
