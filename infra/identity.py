"""Who owns what dlrun starts: a stable identity written on every resource (`dlrun-owner`), so that
`dlrun down --orphans` removes only its own user's leftovers, never a teammate's running cluster."""
from __future__ import annotations

import getpass
import os
import re
import socket

OWNER_ENV = "DLRUN_OWNER"


def owner_identity() -> str:
    """$DLRUN_OWNER, else user@host (the same on every run from this account on this machine)."""
    explicit = os.environ.get(OWNER_ENV, "").strip()
    if explicit:
        return explicit
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def comparable(owner: str) -> str:
    """An owner as every cloud can store it (GCE labels: lower case, digits, '_' and '-', 63 chars)."""
    return re.sub(r"[^a-z0-9_-]", "-", owner.lower())[:63]


def same_owner(a: str, b: str) -> bool:
    return bool(a) and bool(b) and comparable(a) == comparable(b)
