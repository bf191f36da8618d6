"""A fresh HOME with no cloud credentials, as a new user's machine has: every variable the clouds' SDKs (and dlrun's
login checks, infra/refresh/logins.py) read credentials, a profile, a project or a region from, removed."""
from __future__ import annotations

from pathlib import Path

CLOUD_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
             "AWS_DEFAULT_REGION", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
             "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
             "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_CONFIG",
             "DLRUN_GCP_EMULATOR", "DLRUN_GCP_API_ENDPOINT")


def without_cloud_credentials(monkeypatch, tmp_path: Path) -> Path:
    """HOME an empty folder under tmp_path, no local GPU, none of CLOUD_ENV set; the new HOME."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    for var in CLOUD_ENV:
        monkeypatch.delenv(var, raising=False)
    return home
