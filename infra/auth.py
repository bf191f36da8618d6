"""Ray token authentication for every cluster dlrun starts: one secret per cluster (and one for the
local head), kept under $DLRUN_HOME/tokens (0600) and sent as a bearer header by dlrun's clients.

A cloud node gets its token over SSH after boot (infra/vm/ready.py), never through user-data or
metadata, which anyone with describe rights can read; Ray starts on the node only once it is there.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from infra.paths import dlrun_home

LOCAL = "local-head"


def token_path(name: str) -> Path:
    d = dlrun_home() / "tokens"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d / name


def ensure_token(name: str) -> str:
    """The cluster's token, made once (64 hex characters, file mode 0600)."""
    path = token_path(name)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip()


def read_token(name: str) -> str | None:
    path = token_path(name)
    return path.read_text().strip() if path.exists() else None


def remove_token(name: str) -> None:
    token_path(name).unlink(missing_ok=True)


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def ray_env_token() -> str | None:
    """The token Ray's own clients would send to a head dlrun did not start (RAY_AUTH_MODE=token:
    RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH, else ~/.ray/auth_token); None without token mode."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        return None
    token = os.environ.get("RAY_AUTH_TOKEN")
    if not token:
        path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
        try:
            token = path.read_text().strip()
        except OSError:
            token = None
    return token or None
