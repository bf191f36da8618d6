"""The credentials for a registry, from where users keep them; never logged, stored or printed.

In order (the first that has an entry wins):
1. the containers auth file and docker's config, searched as podman/skopeo do (containers-auth.json(5)):
   $REGISTRY_AUTH_FILE, ${XDG_RUNTIME_DIR}/containers/auth.json, ${XDG_CONFIG_HOME:-~/.config}/containers/
   auth.json, then ${DOCKER_CONFIG:-~/.docker}/config.json; an `auths` entry (base64 `user:password` in
   `auth`) keyed by the registry, `https://registry/`, or (podman) `registry/namespace`, the most specific
   first; Docker Hub's entry is docker's `https://index.docker.io/v1/`. A `credHelpers` entry for the
   registry, else `credsStore`, is asked as docker asks it: `docker-credential-<name> get` with the
   server URL on stdin, JSON {Username, Secret} on stdout.
2. ECR (`<account>.dkr.ecr.<region>.amazonaws.com`): ECR's GetAuthorizationToken with the AWS credentials
   boto3 finds (user `AWS`).
3. Artifact Registry (`<region>-docker.pkg.dev`) and Container Registry (`gcr.io`, `*.gcr.io`): an OAuth
   access token of the application default credentials (user `oauth2accesstoken`), as `gcloud auth
   configure-docker` has docker send.
None: ask anonymously.
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from infra.images.reference import DOCKER_HUB

ECR_HOST = re.compile(r"^(\d{12})\.dkr\.ecr(?:-fips)?\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")
DOCKER_HUB_KEY = "https://index.docker.io/v1/"  # docker login's key for Docker Hub
HELPER_TIMEOUT_S = 20.0


class CredentialsProblem(Exception):
    """A source of credentials that should have answered did not (AWS / Google credentials missing or
    refused, a broken auth file); the message names the source, never a secret."""


@dataclass(frozen=True)
class Credential:
    username: str
    password: str = field(repr=False)
    source: str  # where it came from, in words (safe to print)

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.username}:{self.password}".encode()).decode()


def auth_files() -> list[Path]:
    """The files searched, in podman's order, then docker's."""
    out = []
    if os.environ.get("REGISTRY_AUTH_FILE"):
        out.append(Path(os.environ["REGISTRY_AUTH_FILE"]).expanduser())
    if os.environ.get("XDG_RUNTIME_DIR"):
        out.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "containers" / "auth.json")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    out.append(config / "containers" / "auth.json")
    out.append(Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker").expanduser() / "config.json")
    return out


def _normalise_key(key: str) -> str:
    key = re.sub(r"^https?://", "", key.strip()).rstrip("/")
    key = re.sub(r"/v[12]$", "", key)
    host, _, path = key.partition("/")
    if host in ("index.docker.io", "registry-1.docker.io"):
        host = DOCKER_HUB
    return f"{host}/{path}" if path else host


def _scopes(registry: str, repository: str) -> list[str]:
    """registry/a/b, registry/a, registry: podman matches the most specific namespace first."""
    parts = repository.split("/")
    return [f"{registry}/{'/'.join(parts[:i])}" for i in range(len(parts), 0, -1)] + [registry]


def _from_auths(auths: dict, registry: str, repository: str, path: Path) -> Credential | None:
    keyed = {_normalise_key(k): v for k, v in auths.items() if isinstance(v, dict)}
    for scope in _scopes(registry, repository):
        entry = keyed.get(scope)
        if not entry:
            continue
        if entry.get("auth"):
            try:
                user, sep, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise CredentialsProblem(f"{path}: the `auth` entry for {scope} is not base64 of user:password; "
                                         "log in again (docker login / podman login)") from None
            if sep:
                return Credential(user, password, f"{path} ({scope})")
        if entry.get("username") and entry.get("password"):
            return Credential(entry["username"], entry["password"], f"{path} ({scope})")
    return None


def _helper(name: str, registry: str, path: Path) -> Credential | None:
    server = DOCKER_HUB_KEY if registry == DOCKER_HUB else registry
    program = f"docker-credential-{name}"
    try:
        proc = subprocess.run([program, "get"], input=server, capture_output=True, text=True,
                              timeout=HELPER_TIMEOUT_S)
    except FileNotFoundError:
        raise CredentialsProblem(f"{path} names the credential helper {name}, and {program} is not on PATH; "
                                 "install it or remove it from the file") from None
    except subprocess.TimeoutExpired:
        raise CredentialsProblem(f"{program} did not answer in {HELPER_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:  # "credentials not found in native keychain": no entry for this registry
        return None
    try:
        data = json.loads(proc.stdout)
        return Credential(data["Username"], data["Secret"], f"{program} ({path})")
    except (ValueError, KeyError, TypeError):
        raise CredentialsProblem(f"{program} answered something other than its JSON; check the helper") from None


def from_auth_files(registry: str, repository: str) -> Credential | None:
    for path in auth_files():
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            raise CredentialsProblem(f"{path}: not readable JSON; fix it or log in again") from None
        if not isinstance(data, dict):
            continue
        found = _from_auths(data.get("auths") or {}, registry, repository, path)
        if found:
            return found
        helpers = data.get("credHelpers") or {}
        helper = next((v for k, v in helpers.items() if _normalise_key(k) == registry), None) \
            or data.get("credsStore")
        if helper:
            found = _helper(str(helper), registry, path)
            if found:
                return found
    return None


def from_ecr(registry: str) -> Credential | None:
    m = ECR_HOST.match(registry)
    if not m:
        return None
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    account, region = m[1], m[2]
    try:
        data = boto3.client("ecr", region_name=region).get_authorization_token(registryIds=[account])
        token = data["authorizationData"][0]["authorizationToken"]
        user, _, password = base64.b64decode(token).decode().partition(":")
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "error")
        raise CredentialsProblem(f"ECR refused an authorization token for {registry} ({code}); check the AWS "
                                 "credentials and their ecr:GetAuthorizationToken permission") from None
    except BotoCoreError as e:
        raise CredentialsProblem(f"no ECR token for {registry}: {type(e).__name__}; set up AWS credentials "
                                 "(aws configure / AWS_PROFILE)") from None
    return Credential(user, password, "ECR GetAuthorizationToken")


def is_google_registry(registry: str) -> bool:
    host = registry.split(":", 1)[0]
    return host.endswith("-docker.pkg.dev") or host == "gcr.io" or host.endswith(".gcr.io")


def from_google(registry: str) -> Credential | None:
    if not is_google_registry(registry):
        return None
    import google.auth
    from google.auth.exceptions import GoogleAuthError
    from google.auth.transport.requests import Request

    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        creds.refresh(Request())
    except GoogleAuthError as e:
        raise CredentialsProblem(f"no Google token for {registry}: {type(e).__name__}; run `gcloud auth "
                                 "application-default login` or set GOOGLE_APPLICATION_CREDENTIALS") from None
    return Credential("oauth2accesstoken", str(creds.token), "Google application default credentials")


def credential_for(registry: str, repository: str) -> Credential | None:
    """The credential to present to `registry` (host[:port], docker.io for Docker Hub), or None."""
    return from_auth_files(registry, repository) or from_ecr(registry) or from_google(registry)
