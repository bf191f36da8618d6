"""An OCI image reference, parsed and normalised as docker and podman do.

Grammar: github.com/distribution/reference (reference.go, normalize.go): `[registry/]path[:tag][@digest]`;
the first component is a registry when it has a `.` or a `:` or is `localhost`, else the image is on Docker
Hub (`docker.io`), where a one-component name is an official image under `library/`; no tag and no digest
means `:latest`. Docker Hub's API answers at registry-1.docker.io, not docker.io.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")
_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]{32,}$")
_HOST = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
                   r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?$")


@dataclass(frozen=True)
class ImageRef:
    registry: str    # as written (docker.io for Docker Hub), host[:port]
    repository: str  # library/ubuntu, pytorch/pytorch
    tag: str | None  # None with a digest alone
    digest: str | None

    @property
    def api_host(self) -> str:
        """Where the registry's /v2/ API answers."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def reference(self) -> str:
        """What /v2/<name>/manifests/<reference> takes: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def full(self) -> str:
        """The fully qualified name a runtime is given (podman refuses ambiguous short names)."""
        name = f"{self.registry}/{self.repository}"
        if self.tag:
            name += f":{self.tag}"
        return f"{name}@{self.digest}" if self.digest else name

    def __str__(self) -> str:
        return self.full


def parse_reference(text: str) -> ImageRef:
    """The normalised reference; ValueError with what is wrong (one phrase, for the job file's line)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("give an image reference, e.g. pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime")
    raw = text.strip()
    if any(c.isspace() for c in raw):
        raise ValueError(f"'{raw}' has spaces; an image reference is registry/name:tag or name@sha256:digest")
    rest, at, digest = raw.partition("@")
    if at:
        _check_digest(digest)
    registry, path = _split_registry(rest)
    tag = None
    if ":" in path[path.rfind("/") + 1:]:
        path, _, tag = path.rpartition(":")
        if not _TAG.match(tag):
            raise ValueError(f"tag '{tag}' is not valid: letters, digits, _ . - (up to 128), not starting with . or -")
    if not path:
        raise ValueError(f"'{raw}' names no repository")
    _check_path(path)
    if registry.lower() in _HUB_ALIASES:
        registry = DOCKER_HUB
        path = path if "/" in path else f"library/{path}"
    if len(f"{registry}/{path}") > 255:
        raise ValueError("the repository name is longer than 255 characters")
    return ImageRef(registry=registry, repository=path, tag=tag or (None if digest else "latest"),
                    digest=digest or None)


def _check_digest(digest: str) -> None:
    if not _DIGEST.match(digest):
        raise ValueError(f"'{digest}' is not a digest; write @sha256:<64 hex digits>")
    if digest.startswith("sha256:") and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ValueError(f"'{digest}' is not a sha256 digest (64 lowercase hex digits)")


def _split_registry(rest: str) -> tuple[str, str]:
    first, slash, remainder = rest.partition("/")
    if not (slash and ("." in first or ":" in first or first == "localhost")):
        return DOCKER_HUB, rest
    if not _HOST.match(first):
        raise ValueError(f"'{first}' is not a registry host[:port]")
    return first, remainder


def _check_path(path: str) -> None:
    for part in path.split("/"):
        if part != part.lower() and _COMPONENT.match(part.lower()):
            raise ValueError(f"repository name '{path}' must be lowercase")
        if not _COMPONENT.match(part):
            raise ValueError(f"'{part}' in '{path}' is not a valid name component (lowercase letters, digits, "
                             "separated by . _ __ or -)")


def is_local_registry(host: str) -> bool:
    """localhost and loopback addresses: plain HTTP is allowed there, as docker's default insecure range
    127.0.0.0/8 and podman's localhost rule do."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") and host.count(":") == 1 else host
    name = name.strip("[]").split("]")[0].lower()
    return name == "localhost" or name.startswith("127.") or name == "::1"
