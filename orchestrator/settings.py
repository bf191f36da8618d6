"""Every setting dlrun reads: its environment variables (its own DLRUN_* and the Ray, AWS and Google Cloud
ones it honours) and the keys of $DLRUN_HOME/config.yaml, each with its default and meaning, in one table.

docs/settings.md's table is generated from this one (`python -m orchestrator.settings docs/settings.md`
rewrites it) and tests/unit/test_settings.py checks both against each other and against the source, so a
new variable cannot be read without its row. Read a variable with the typed readers below; they take the
default from the row.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

Kind = Literal["env", "config"]
# who reads it: dlrun on this machine; the job's own process on its node (dlrun sets it for the job);
# the node's boot script
Reader = Literal["dlrun", "job", "node"]


@dataclass(frozen=True)
class Setting:
    name: str
    type: type                   # what the value is read as: str, int, float, Path
    default: str | None          # the value when unset, as one writes it; None: unset means what `meaning` says
    meaning: str                 # one line
    kind: Kind = "env"
    read_by: Reader = "dlrun"

    @property
    def foreign(self) -> bool:
        """An environment variable of Ray, a cloud SDK or the system that dlrun honours."""
        return self.kind == "env" and not self.name.startswith("DLRUN_")


def _env(name, type_, default, meaning, read_by: Reader = "dlrun") -> Setting:
    return Setting(name, type_, default, meaning, "env", read_by)


def _key(name, type_, default, meaning) -> Setting:
    return Setting(name, type_, default, meaning, "config", "dlrun")


SETTINGS: tuple[Setting, ...] = (
    # --- dlrun's own, on this machine
    _env("DLRUN_HOME", Path, "~/.dlrun", "state, keys, logs, profiles, the catalog's refreshed copy"),
    _env("DLRUN_RAY_ADDRESS", str, None, "use this Ray head for local jobs (dlrun then starts none)"),
    _env("DLRUN_DASHBOARD_PORT", int, "8265", "the dashboard port of the local head dlrun starts or attaches to"),
    _env("DLRUN_HEAD_START_S", float, "180", "seconds the local head dlrun starts may take until its Jobs API "
         "answers (all tries; a cold venv or a busy machine is slow)"),
    _env("DLRUN_RAY_BIN", Path, None, "the `ray` executable the local head is started with; unset: the one "
         "beside dlrun's Python, else `ray` on PATH"),
    _env("DLRUN_LOCAL_GPUS", str, None, "`none`: the plan leaves this machine's GPUs out (nvidia-smi is not "
         "asked)"),
    _env("DLRUN_OWNER", str, None, "the owner written on every cloud resource; unset: user@host"),
    _env("DLRUN_CATALOG_DIR", Path, None, "read prices and GPU specs from this directory; unset: the shipped "
         "configs/catalog"),
    _env("DLRUN_CATALOG_REFRESH", str, "on", "`off`: a plan never reads prices from the clouds by itself"),
    _env("DLRUN_AWS_PRICING_REGION", str, "us-east-1", "the AWS Price List endpoint's region (us-east-1, "
         "eu-central-1 or ap-south-1)"),
    _env("DLRUN_REFRESH_DEADLINE_S", float, "60", "seconds each price, offer or quota source may take in `dlrun "
         "catalog refresh` / `quotas`, retries included"),
    _env("DLRUN_PLAN_REFRESH_DEADLINE_S", float, "5", "the same for what a plan reads by itself (then it plans "
         "with the cached rows and a note)"),
    _env("DLRUN_GCP_API_ENDPOINT", str, None, "a Compute Engine endpoint (Private Service Connect, an emulator)"),
    _env("DLRUN_GCP_BILLING_ENDPOINT", str, None, "a Cloud Billing catalog endpoint (private, an emulator)"),
    _env("DLRUN_GCP_EMULATOR", str, None, "`1`: DLRUN_GCP_API_ENDPOINT and DLRUN_GCP_BILLING_ENDPOINT are "
         "emulators, called without credentials (else they get yours)"),
    _env("DLRUN_GCP_BILLING_API_KEY", str, None, "an API key for the Cloud Billing catalog instead of "
         "credentials"),
    _env("DLRUN_GCP_IAM_ENDPOINT", str, None, "an IAM endpoint (an emulator)"),
    _env("DLRUN_GCS_ENDPOINT", str, None, "a Cloud Storage endpoint for dlrun and the nodes (an emulator)"),
    _env("DLRUN_SSH_CIDR", str, None, "your address for SSH ingress, when it cannot be discovered"),
    _env("DLRUN_SSH_CONFIG", Path, None, "an OpenSSH config file passed as `ssh -F` (a bastion, ProxyJump, "
         "host aliases)"),
    _env("DLRUN_SSH_WAIT_S", float, "600", "seconds a new node may take to accept SSH"),
    _env("DLRUN_BOOT_TIMEOUT", float, "900", "seconds a new node may take to install and start Ray"),
    _env("DLRUN_NODE_POLL_S", float, "5", "seconds between polls of a cluster's node states"),
    _env("DLRUN_HEARTBEAT_S", float, "60", "seconds between dlrun's heartbeats to a cloud cluster's watchdog"),
    _env("DLRUN_HEARTBEAT_TIMEOUT_S", float, "900", "a cloud node powers itself off after this long without "
         "dlrun's heartbeat"),
    _env("DLRUN_CLOUD_RETRY_S", float, "900", "how long a re-attaching supervisor keeps asking a cloud it "
         "cannot reach"),
    _env("DLRUN_INSECURE_REGISTRIES", str, None, "container registries (host:port, comma-separated) dlrun may "
         "reach over plain HTTP; localhost and 127.0.0.0/8 always may, as with docker and podman"),
    _env("DLRUN_CONTAINER_RUNTIME", str, None, "`podman`, `docker` or a path: the runtime a local job's "
         "`image:` runs with; unset: podman if it works, else docker"),
    _env("DLRUN_LOCAL_PULL_MB_S", float, "25", "this machine's image download rate in MB/s of compressed layers "
         "(the plan's pull time for a local job)"),
    # --- set by dlrun for the job, read by the job's process on its node (jobs/)
    _env("DLRUN_JOB_ID", str, None, "the job's id", "job"),
    _env("DLRUN_CHECKPOINT_DIR", str, None, "where the job writes and finds its checkpoints (a directory, "
         "s3://… or gs://…)", "job"),
    _env("DLRUN_PRICE_PER_HOUR", float, None, "the planned $/h of the cluster (the job's cost gauge)", "job"),
    _env("DLRUN_EXPECT_GPU", str, None, "`1` on a GPU offer: the built-in jobs never fall back to the CPU", "job"),
    _env("DLRUN_PROBE", str, None, "`1` while dlrun times the job with a short local run", "job"),
    _env("DLRUN_METRICS_FLUSH_S", float, "0", "seconds a job waits after its result so Ray exports its last "
         "gauges", "job"),
    _env("DLRUN_DATA_SOURCES", str, None, "the job's `data:` sources as JSON, synced by jobs/inputs.py", "job"),
    _env("DLRUN_DATA_CACHE", Path, "~/.dlrun/data", "where jobs/inputs.py keeps the synced sources", "job"),
    _env("DLRUN_DATA_DIR", Path, None, "the job's data: the one source's directory, or one entry per source",
         "job"),
    _env("DLRUN_NOTICE_FILE", Path, None, "written by jobs/notice.py when the cloud announces a preemption",
         "job"),
    _env("DLRUN_METADATA_URL", str, "http://169.254.169.254", "the metadata service jobs/notice.py polls", "job"),
    _env("DLRUN_NODE_DIR", Path, "/var/lib/dlrun", "the node's dlrun directory (venv, boot log, markers)", "node"),
    # --- Ray's, the clouds' and the system's, honoured as their own tools do
    _env("RAY_ADDRESS", str, None, "set by Ray inside a job: the jobs/ helpers then report through Ray", "job"),
    _env("RAY_AUTH_MODE", str, None, "`token`: a head dlrun did not start is reached with Ray's own token",
         "dlrun"),
    _env("RAY_AUTH_TOKEN", str, None, "that token (with RAY_AUTH_MODE=token)"),
    _env("RAY_AUTH_TOKEN_PATH", Path, "~/.ray/auth_token", "the file holding that token"),
    _env("RAY_TMPDIR", Path, None, "Ray's temp root (else TMPDIR, else /tmp): where `dlrun dashboard "
         "--metrics` finds the head's session"),
    _env("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", str, "0", "Ray's: `1` ships files .gitignore lists (part of a "
         "package's digest)"),
    _env("RAY_max_grpc_message_size", int, "536870912", "Ray's largest working_dir package in bytes (512 MiB)"),
    _env("RAY_raylet_start_wait_time_s", int, "120", "Ray's: how long `ray start` waits for its node to "
         "register (Ray's default 30; dlrun's local head: 120 unless set)"),
    _env("RAY_DASHBOARD_STARTUP_TIMEOUT_S", int, "120", "Ray's: how long `ray start` waits for its dashboard "
         "(Ray's default 60; dlrun's local head: 120 unless set)"),
    _env("AWS_ENDPOINT_URL", str, None, "boto3's endpoint for every AWS service (an emulator); "
         "`AWS_ENDPOINT_URL_<SERVICE>` for one"),
    _env("AWS_ENDPOINT_URL_S3", str, None, "boto3's S3 endpoint (dlrun's and the job's checkpoints)"),
    _env("AWS_DEFAULT_REGION", str, "us-east-1", "the region whose prices a plan reads when the job names none"),
    _env("AWS_REGION", str, None, "boto3's region, ahead of AWS_DEFAULT_REGION: where `dlrun check` asks AWS who you "
         "are and which regions you reach"),
    _env("AWS_PROFILE", str, None, "AWS credentials as boto3 finds them (also AWS_ACCESS_KEY_ID, ~/.aws)"),
    _env("AWS_ACCESS_KEY_ID", str, None, "AWS credentials from the environment"),
    _env("AWS_WEB_IDENTITY_TOKEN_FILE", Path, None, "AWS credentials from a web identity (EKS, CI)"),
    _env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", str, None, "AWS credentials of an ECS task"),
    _env("AWS_CONTAINER_CREDENTIALS_FULL_URI", str, None, "AWS credentials from a container endpoint"),
    _env("AWS_SHARED_CREDENTIALS_FILE", Path, "~/.aws/credentials", "boto3's credentials file"),
    _env("AWS_CONFIG_FILE", Path, "~/.aws/config", "boto3's config file"),
    _env("GOOGLE_CLOUD_PROJECT", str, None, "the GCP project (else CLOUDSDK_CORE_PROJECT, else the ADC file's)"),
    _env("CLOUDSDK_CORE_PROJECT", str, None, "gcloud's project"),
    _env("GOOGLE_APPLICATION_CREDENTIALS", Path, None, "a GCP credentials file instead of gcloud's ADC file"),
    _env("CLOUDSDK_CONFIG", Path, "~/.config/gcloud", "gcloud's directory (its application default credentials)"),
    _env("REGISTRY_AUTH_FILE", Path, None, "podman's registry auth file, searched first for `image:` "
         "credentials"),
    _env("XDG_RUNTIME_DIR", Path, None, "podman's default auth file is `$XDG_RUNTIME_DIR/containers/auth.json`"),
    _env("XDG_CONFIG_HOME", Path, "~/.config", "then `$XDG_CONFIG_HOME/containers/auth.json`"),
    _env("DOCKER_CONFIG", Path, "~/.docker", "then docker's `config.json` there (`auths`, `credHelpers`, "
         "`credsStore`)"),
    _env("TZ", str, None, "the time zone schedules' cron expressions are read in; unset: the system's"),
    _env("TMPDIR", Path, None, "the system's temp directory: Ray's temp root on Linux when RAY_TMPDIR is unset"),
    # --- $DLRUN_HOME/config.yaml (orchestrator/config.py, infra/ray_cluster/settings.py)
    _key("default_deadline", str, "72h", "applied when a job names no deadline (the plan says so)"),
    _key("optimize", str, "cost", "`cost` or `time`: what best means among the candidates that fit"),
    _key("mirrors.pypi", str, None, "a PEP 503 index cloud nodes get uv and every package from; unset: PyPI"),
    _key("mirrors.torch", str, None, "stands for https://download.pytorch.org/whl (its cpu/, cu126/, …)"),
    _key("mirrors.apt", str, None, "a Debian/Ubuntu mirror (`deb URL CODENAME main`) a cloud node installs podman "
         "from when a job has `image:` and the VM image has no container runtime; unset: the image's apt sources"),
    _key("aws.subnets", dict, None, "`REGION: subnet-ID`: launch there instead of the default VPC / dlrun's VPC"),
    _key("clusters.NAME.address", str, None, "a team Ray cluster's dashboard / Jobs API URL (required)"),
    _key("clusters.NAME.token_file", Path, None, "the file holding that cluster's Ray auth token"),
    _key("clusters.NAME.price_per_gpu_hour", float, "0", "the team's internal rate per GPU-hour"),
    _key("clusters.NAME.price_per_cpu_hour", float, "0", "the team's internal rate per CPU-hour"),
    _key("clusters.NAME.max_gpus", int, None, "the most GPUs dlrun may use there at once; unset: no limit"),
    _key("clusters.NAME.shared_path", Path, None, "a directory this machine and every node see (checkpoints)"),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} has no row in orchestrator/settings.py SETTINGS; add one") from None


def _raw(name: str, expected: type) -> str | None:
    """The variable's value (unset or empty: the row's default)."""
    row = setting(name)
    if row.kind != "env" or row.type is not expected:
        raise TypeError(f"{name} ({row.kind} setting) is read as {row.type.__name__}, not {expected.__name__}")
    return os.environ.get(name) or row.default


def _number(name: str, expected: type):
    raw = _raw(name, expected)
    if setting(name).default is None or raw is None:
        raise TypeError(f"{name} has no default in SETTINGS: a number read while unset needs one in its row")
    try:
        return expected(raw)
    except ValueError:
        from orchestrator.errors import UsageError

        what = "a whole number" if expected is int else "a number"
        raise UsageError(f"{name}={raw!r} is not {what}; set it like {name}={setting(name).default} "
                         "or unset it") from None


def env_str(name: str) -> str:
    """The value, else the row's default, else ""."""
    return _raw(name, str) or ""


def env_float(name: str) -> float:
    """The number, else the row's default (TypeError for a row without one: it says what unset means)."""
    return _number(name, float)


def env_int(name: str) -> int:
    return _number(name, int)


def env_path(name: str) -> Path | None:
    """The path (~ expanded), else the row's default; None when unset without a default."""
    raw = _raw(name, Path)
    return Path(raw).expanduser() if raw else None


# --- docs/settings.md's settings table ----------------------------------------------------------------

README_START = "<!-- settings table: generated by `python -m orchestrator.settings docs/settings.md` -->"
README_END = "<!-- end of settings table -->"
GROUPS: tuple[tuple[str, Callable[[Setting], bool]], ...] = (
    ("Environment: dlrun on this machine", lambda s: s.kind == "env" and s.read_by == "dlrun" and not s.foreign),
    ("Environment: read on a cluster's nodes (dlrun sets the job's for it)",
     lambda s: s.kind == "env" and s.read_by in ("job", "node") and not s.foreign),
    ("Environment: Ray's, the clouds' and the system's, honoured", lambda s: s.foreign),
    ("`$DLRUN_HOME/config.yaml`", lambda s: s.kind == "config"),
)


def readme_block() -> str:
    """The settings section (docs/settings.md) between README_START and README_END, from the table."""
    lines = [README_START]
    for title, member in GROUPS:
        lines += ["", f"**{title}**", "", "| name | default | meaning |", "|---|---|---|"]
        lines += [f"| `{s.name}` | {f'`{s.default}`' if s.default is not None else '—'} | {s.meaning} |"
                  for s in SETTINGS if member(s)]
    return "\n".join(lines + ["", README_END])


def with_readme_block(text: str) -> str:
    """A page's text with its settings section replaced by the table's."""
    head, start, rest = text.partition(README_START)
    _, end, tail = rest.partition(README_END)
    if not (start and end):
        raise ValueError(f"the page has no '{README_START}' ... '{README_END}' section")
    return head + readme_block() + tail


if __name__ == "__main__":  # python -m orchestrator.settings docs/settings.md
    import sys

    readme = Path(sys.argv[1])
    readme.write_text(with_readme_block(readme.read_text()))
