"""Where a cloud's credentials would come from, read from the environment and the usual files only (no
network, no SDK import): what `dlrun check` reports first and what a plan asks before it plans onto a cloud.

AWS, in boto3's order (boto3.amazonaws.com/v1/documentation/api/latest/guide/credentials.html, read
2026-11): AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY, AWS_PROFILE (a profile of ~/.aws/credentials or
~/.aws/config), a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE), container credentials
(AWS_CONTAINER_CREDENTIALS_*_URI), then the files' [default] profile (keys, credential_process, SSO, a role).
AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE move the files. Last, on an EC2 instance (its firmware says
"Amazon EC2" in /sys/class/dmi/id), the instance's role: only the metadata service (a call) says whether
it has one, which `dlrun check` asks.

GCP (google.auth.default, cloud.google.com/docs/authentication/application-default-credentials, read
2026-11): GOOGLE_APPLICATION_CREDENTIALS (a key file), else gcloud's application_default_credentials.json
(CLOUDSDK_CONFIG or ~/.config/gcloud); the project from GOOGLE_CLOUD_PROJECT / CLOUDSDK_CORE_PROJECT, the
credentials file, or gcloud's active configuration (`gcloud config set project`). DLRUN_GCP_EMULATOR=1 with
DLRUN_GCP_API_ENDPOINT: an emulator, called without credentials. On a Compute Engine VM ("Google Compute
Engine" in /sys/class/dmi/id, as google.auth checks), the VM's service account through its metadata server.
"""
from __future__ import annotations

import configparser
import json
import os
from dataclasses import dataclass
from pathlib import Path

DMI_DIR = Path("/sys/class/dmi/id")  # the machine's firmware identity (Linux)
AWS_FIX = "run `aws configure` (or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
GCP_LOGIN_FIX = "run `gcloud auth application-default login`"
GCP_PROJECT_FIX = "run `gcloud config set project PROJECT_ID` (or set GOOGLE_CLOUD_PROJECT)"


@dataclass(frozen=True)
class Login:
    """A cloud's credentials as this machine has them configured, before any call."""

    cloud: str
    source: str = ""     # where they come from, in words ("" when none were found)
    account: str = ""    # the profile or project configured (no call made)
    region: str = ""     # the default region configured, where the cloud has one
    missing: str = ""    # "" when usable; else what is missing
    fix: str = ""        # what logs in (fixes what is missing): "run `the command`" (and any other way)

    @property
    def usable(self) -> bool:
        return not self.missing

    @property
    def problem(self) -> str | None:
        """One line: what is missing and the command that fixes it; None when nothing is."""
        return f"{self.missing}: {self.fix}" if self.missing else None


# ---- AWS ---------------------------------------------------------------------------------------------

def _ini(path: str) -> configparser.ConfigParser | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        found = parser.read(Path(path).expanduser())
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    return parser if found else None


def _aws_files() -> tuple[str, str]:
    return (os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials",
            os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config")


# what a profile may hold that gives credentials, and how it is said
_PROFILE_KEYS = (("aws_access_key_id", "keys"), ("credential_process", "credential_process"),
                 ("sso_session", "SSO"), ("sso_start_url", "SSO"), ("role_arn", "a role"),
                 ("web_identity_token_file", "a web identity token"))


def _aws_profile(name: str) -> tuple[str, str] | None:
    """(where, what) of a profile that holds credentials, or None."""
    creds_path, config_path = _aws_files()
    for path, section in ((creds_path, name), (config_path, name if name == "default" else f"profile {name}")):
        parser = _ini(path)
        if parser is not None and parser.has_section(section):
            for key, what in _PROFILE_KEYS:
                if parser.get(section, key, fallback=""):
                    return f"{path} [{section}]", what
    return None


def _aws_profiles() -> list[str]:
    creds_path, config_path = _aws_files()
    names = []
    for path, strip in ((creds_path, ""), (config_path, "profile ")):
        parser = _ini(path)
        names += [s.removeprefix(strip) for s in parser.sections()] if parser is not None else []
    return list(dict.fromkeys(names))


def _aws_region(profile: str) -> str:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        return region
    parser = _ini(_aws_files()[1])
    section = profile if profile == "default" else f"profile {profile}"
    return parser.get(section, "region", fallback="") if parser is not None else ""


def aws_login() -> Login:
    env = os.environ.get
    profile = env("AWS_PROFILE") or env("AWS_DEFAULT_PROFILE") or "default"
    region = _aws_region(profile)

    def login(source: str = "", missing: str = "", account: str = "") -> Login:
        return Login("aws", source, account, region, missing, AWS_FIX)

    if env("AWS_ACCESS_KEY_ID") or env("AWS_SECRET_ACCESS_KEY"):
        if not (env("AWS_ACCESS_KEY_ID") and env("AWS_SECRET_ACCESS_KEY")):
            half = "AWS_SECRET_ACCESS_KEY" if env("AWS_ACCESS_KEY_ID") else "AWS_ACCESS_KEY_ID"
            return login(missing=f"{half} is not set (the other half of the key is)")
        return login("environment variables AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY")
    if env("AWS_PROFILE") or env("AWS_DEFAULT_PROFILE"):
        found = _aws_profile(profile)
        if found is None:
            return Login("aws", "", profile, region, f"AWS profile '{profile}' (AWS_PROFILE) has no credentials "
                         "in ~/.aws", f"run `aws configure --profile {profile}`")
        return login(f"profile {profile} (AWS_PROFILE): {found[1]} in {found[0]}", account=profile)
    if env("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return login("a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)")
    if env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return login("container credentials (AWS_CONTAINER_CREDENTIALS_*_URI)")
    found = _aws_profile("default")
    if found is not None:
        return login(f"the default profile: {found[1]} in {found[0]}", account="default")
    if "Amazon EC2" in _dmi("sys_vendor") + _dmi("product_name"):
        return login("this EC2 instance's role (from its metadata service)")
    others = [p for p in _aws_profiles() if p != "default"]
    if others:
        return Login("aws", "", "", region, f"no default AWS profile (~/.aws has {', '.join(others[:3])})",
                     f"run `export AWS_PROFILE={others[0]}` (or `aws configure`)")
    return login(missing="no AWS credentials found (AWS_PROFILE, AWS_ACCESS_KEY_ID or ~/.aws)")


# ---- GCP ---------------------------------------------------------------------------------------------

def gcp_emulated() -> bool:
    """DLRUN_GCP_EMULATOR=1: the endpoints DLRUN_GCP_API_ENDPOINT / _BILLING_ENDPOINT name are emulators, called
    without credentials; otherwise they are Google's APIs elsewhere and get the user's credentials."""
    return os.environ.get("DLRUN_GCP_EMULATOR", "").lower() in ("1", "on", "yes", "true")


def _gcloud_dir() -> Path:
    return Path(os.environ.get("CLOUDSDK_CONFIG") or "~/.config/gcloud").expanduser()


def adc_file() -> Path | None:
    """The application default credentials file google.auth would read (None when there is none)."""
    explicit = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if explicit:
        return Path(explicit).expanduser()
    p = _gcloud_dir() / "application_default_credentials.json"
    return p if p.is_file() else None


def _adc_data(path: Path | None) -> dict:
    try:
        data = json.loads(path.read_text()) if path is not None else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _gcloud_project() -> str:
    """core/project of gcloud's active configuration (what `gcloud config set project` wrote)."""
    base = _gcloud_dir()
    try:
        active = (base / "active_config").read_text().strip() or "default"
    except OSError:
        active = "default"
    parser = _ini(str(base / "configurations" / f"config_{active}"))
    return parser.get("core", "project", fallback="") if parser is not None else ""


def gcp_project() -> str | None:
    project = os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
    if project:
        return project
    data = _adc_data(adc_file())
    return data.get("quota_project_id") or data.get("project_id") or _gcloud_project() or None


def gcp_login() -> Login:
    project = gcp_project() or ""
    endpoint = os.environ.get("DLRUN_GCP_API_ENDPOINT", "")
    path = adc_file()
    if gcp_emulated():
        source = f"an emulator at {endpoint or '(no DLRUN_GCP_API_ENDPOINT)'} (DLRUN_GCP_EMULATOR=1, no credentials)"
    elif path is None and on_gce():
        source = "this Compute Engine VM's service account (from its metadata server)"
        project = project or "(this VM's project)"
    elif path is None:
        return Login("gcp", "", project, "", "no GCP application default credentials", GCP_LOGIN_FIX)
    elif not path.is_file():
        return Login("gcp", "", project, "", f"GOOGLE_APPLICATION_CREDENTIALS names {path}, which is not a file",
                     f"{GCP_LOGIN_FIX} (or point GOOGLE_APPLICATION_CREDENTIALS at a key file)")
    else:
        data = _adc_data(path)
        kind = {"service_account": f"service account {data.get('client_email', '?')}",
                "authorized_user": "a user login", "external_account": "workload identity federation",
                "impersonated_service_account": "an impersonated service account"}.get(
            str(data.get("type")), f"type {data.get('type') or 'unknown'}")
        how = "GOOGLE_APPLICATION_CREDENTIALS" if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") else \
            "application default credentials"
        source = f"{how}: {kind} ({_home_relative(path)})"
    if not project:
        return Login("gcp", source, "", "", "no GCP project configured", GCP_PROJECT_FIX)
    return Login("gcp", source, project, fix=GCP_LOGIN_FIX)


def on_gce() -> bool:
    return "Google Compute Engine" in _dmi("product_name")


def _dmi(name: str) -> str:
    try:
        return (DMI_DIR / name).read_text().strip()
    except OSError:
        return ""


def _home_relative(path: Path) -> str:
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)
