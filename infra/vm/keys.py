"""The per-cluster SSH key: an ed25519 key dlrun makes locally (the private half never leaves this
machine), handed to the cloud as a public key (AWS key pair import / GCE `ssh-keys` metadata)."""
from __future__ import annotations

import os
from pathlib import Path

from infra.paths import keys_dir


def key_path(cluster_id: str) -> Path:
    return keys_dir() / f"{cluster_id}.pem"


def ensure_cluster_key(cluster_id: str, comment: str = "dlrun") -> tuple[Path, str]:
    """(private key file 0600, OpenSSH public key line): made once per cluster, reused after."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = key_path(cluster_id)
    if path.exists():
        key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
    else:
        key = Ed25519PrivateKey.generate()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                      serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    return path, f"{public} {comment}"


def remove_cluster_key(cluster_id: str) -> None:
    key_path(cluster_id).unlink(missing_ok=True)
