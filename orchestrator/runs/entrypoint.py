"""What runs on the cluster: the entrypoint command and the Ray runtime_env of a job."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

import jobs
from orchestrator.planning.local_requirements import unmet_requirements
from orchestrator.planning.spec import JobSpec
from orchestrator.state.db import dlrun_home
from orchestrator.settings import env_str

JOBS_DIR = Path(jobs.__file__).resolve().parent
EXCLUDES = [".git", ".venv", "venv", "__pycache__", "*.pyc", ".pytest_cache", ".hypothesis"]


def run_key(spec: JobSpec) -> str:
    """Identity of 'the same training run': resubmitting the same job file (and workdir and data
    content) resumes its checkpoints."""
    keep = spec.model_dump(mode="json", include={"name", "job", "run", "args", "workload", "env"})
    if spec.workdir:  # changed code is a new run (a key without a workdir stays as it was)
        from orchestrator.planning.workdir import workdir_digest

        keep["workdir_content"] = workdir_digest(spec.workdir)
    if spec.data:  # so is other data (a key without data stays as it was)
        from orchestrator.planning.data_inputs import data_identity

        keep["data"] = data_identity(spec.data)
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:12]


def checkpoint_location(spec: JobSpec, key: str) -> str:
    """Where the job reads and writes checkpoints (DLRUN_CHECKPOINT_DIR): the spec's, per run key."""
    base = spec.checkpoint or str(dlrun_home() / "checkpoints" / spec.name)
    if "://" in base:
        return f"{base.rstrip('/')}/{key}"
    return str(Path(base).expanduser() / key)


def checkpoint_packages(location: str) -> list[str]:
    """What a cluster node needs for jobs.checkpoint to reach `location` (none for a local path)."""
    from infra.buckets import node_client_packages

    return node_client_packages(location) if "://" in location else []


def attempt_checkpoint(spec: JobSpec, key: str, base: str | None, *, default: str) -> str:
    """The checkpoint location of an attempt: its candidate's planned bucket (or node disk) `base`, per run key."""
    if not base:
        return default
    if "://" not in base or base == (spec.checkpoint or "").rstrip("/"):
        return f"{base.rstrip('/')}/{key}"  # the job's own location: as checkpoint_location (and --fresh) has it
    return f"{base.rstrip('/')}/{spec.name}/{key}"  # dlrun's bucket holds every job of its owner


def node_storage_env(checkpoint: str, region: str) -> dict[str, str]:
    """What a cloud node's S3 client needs besides its role: the region, and the S3 endpoint dlrun itself
    uses when that is not AWS's (an S3-compatible store: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL); for
    gs://, only the GCS endpoint when dlrun's is not Google's (DLRUN_GCS_ENDPOINT). Never keys."""
    if checkpoint.startswith("gs://"):
        # credentials: the node's service account via its metadata server; API_ENDPOINT_OVERRIDE (unlike
        # STORAGE_EMULATOR_HOST) keeps them when the endpoint is not Google's (google-cloud-storage Client)
        endpoint = env_str("DLRUN_GCS_ENDPOINT")
        return {"API_ENDPOINT_OVERRIDE": endpoint} if endpoint else {}
    if not checkpoint.startswith("s3://"):
        return {}
    env = {"AWS_DEFAULT_REGION": region}
    endpoint = env_str("AWS_ENDPOINT_URL_S3") or env_str("AWS_ENDPOINT_URL")
    if endpoint:
        env["AWS_ENDPOINT_URL_S3"] = endpoint
    return env


def data_env(spec: JobSpec, *, local: bool, checkpoint: str) -> tuple[dict[str, str], tuple, tuple]:
    """(the env jobs/inputs.py reads, the local directories a cloud launch uploads first, the bucket URLs
    a cloud node must be allowed to read)."""
    if not spec.data:
        return {}, (), ()
    from orchestrator.planning.data_inputs import node_sources, read_urls

    sources, uploads = node_sources(spec.data, local=local, checkpoint=checkpoint)
    env = {"DLRUN_DATA_SOURCES": json.dumps(sources)}
    if local:
        env["DLRUN_DATA_CACHE"] = str(dlrun_home() / "data")
        return env, (), ()
    return env, tuple(uploads), read_urls(sources, checkpoint)


def num_workers(spec: JobSpec, accelerator_count: int) -> int:
    return spec.resources.num_nodes * max(accelerator_count, 1) if spec.resources.num_nodes > 1 \
        else max(accelerator_count, 1)


def entrypoint(spec: JobSpec, *, local: bool, workers: int, notice_cloud: str | None = None,
               image: str = "", gpus: bool = False) -> str:
    """The job's command (a `run:` command under jobs/tee.py); on a spot node of `notice_cloud`, run under
    jobs/notice.py's watcher. image: how the job's `image:` runs ("" none; "runtime": in podman/docker on
    this machine, dlrun's helpers around it on the host; "image_uri": Ray starts the job in the image, where
    nothing of dlrun's is, so the command runs bare)."""
    if image == "image_uri":
        return _command(spec, local=False, workers=workers)
    command = _command(spec, local=local and not image, workers=workers)
    if image == "runtime":
        command = container_command(spec, command, gpus=gpus)
    from jobs.notice import CHECKS

    python = shlex.quote(sys.executable) if local else "python3"
    if spec.run:  # its own output read for progress and metrics (tqdm, Lightning, HF Trainer: jobs/tee.py)
        command = f"{python} -m jobs.tee -- sh -c {shlex.quote(command)}"
    if spec.data:  # jobs/inputs.py syncs the data, sets DLRUN_DATA_DIR and becomes the job
        command = f"{python} -m jobs.inputs -- {command}"
    if notice_cloud not in CHECKS:
        return command
    return f"python3 -m jobs.notice --cloud {notice_cloud} -- {command}"


def container_command(spec: JobSpec, command: str, *, gpus: bool) -> str:
    """A local job's command in its image: infra/images/run_job.py (mounts, env, the python3 check) then
    the runtime; UsageError (exit 2) when no runtime works here."""
    from infra.images.reference import parse_reference
    from infra.images.runtime import INSTALL_HINT, find_runtime
    from orchestrator.errors import UsageError

    runtime, ref = find_runtime(), parse_reference(spec.image or "")
    if runtime.path is None:
        raise UsageError(f"{spec.name}: image {spec.image} runs in a container on this machine, and no container "
                         f"runtime works here ({runtime.problem}); {INSTALL_HINT}")
    args = [sys.executable, "-m", "infra.images.run_job", "--runtime", runtime.path, "--image", ref.full,
            "--pull", spec.image_pull or "if-missing", *(["--gpus"] if gpus else [])]
    for name in sorted(spec.env):
        args += ["--env", name]
    return " ".join(map(shlex.quote, args)) + " -- sh -c " + shlex.quote(command)


def image_mode(spec: JobSpec, cloud: str) -> str:
    """How the job's `image:` runs on backend `cloud`: "" (none), "runtime" (podman/docker on this machine),
    "image_uri" (Ray's runtime env: a remote cluster dlrun did not boot, so only Ray can start the image)."""
    from infra import capabilities

    if not spec.image:
        return ""
    caps = capabilities(cloud)
    if not caps.remote:
        return "runtime"
    return "image_uri" if not caps.provisioned else ""


def _command(spec: JobSpec, *, local: bool, workers: int) -> str:
    python = shlex.quote(sys.executable) if local else "python3"
    if spec.run:
        return spec.run
    from jobs import BUILTIN_JOBS

    assert spec.job is not None  # a spec names `run` or `job` (planning/spec.py checks it)
    module = BUILTIN_JOBS[spec.job][0]
    args = []
    if spec.workload:
        args += ["--epochs", str(spec.workload.epochs), "--batch-size", str(spec.workload.batch_size)]
        if spec.workload.precision != "fp32":
            args += ["--precision", spec.workload.precision]
    if workers > 1:
        args += ["--num-workers", str(workers)]
    args += spec.args
    return " ".join([python, "-u", "-m", module, *map(shlex.quote, args)])


def _staged_jobs_dir() -> str:
    """A copy of jobs/ in its own directory: the working_dir of a built-in job (small upload)."""
    stage = Path(tempfile.gettempdir()) / f"dlrun-stage-{os.getuid()}-{os.getpid()}"  # one per submitter
    target = stage / "jobs"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(JOBS_DIR, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return str(stage)


def runtime_env(spec: JobSpec, *, job_id: str, checkpoint: str, price_per_hour: float, local: bool,
                extra_env: dict[str, str] | None = None, image: str = "") -> dict:
    env = {**spec.env, "DLRUN_JOB_ID": job_id, "DLRUN_CHECKPOINT_DIR": checkpoint,
           "DLRUN_PRICE_PER_HOUR": f"{price_per_hour:.6f}", "PYTHONUNBUFFERED": "1",
           "RAY_USAGE_STATS_ENABLED": "0", **(extra_env or {})}
    if local:
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        # never secrets: runtime_env is shown in the dashboard; the head inherits the caller's env
        for var in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
            if var in os.environ and var not in env:
                env[var] = os.environ[var]
    renv: dict = {"env_vars": env}
    if image == "image_uri" and spec.image:
        from infra.images.reference import parse_reference

        # Ray takes image_uri only with env_vars and config (ray 2.60 ImageURIPlugin.get_compatible_keys);
        # the planner left out every cluster a job that needs more (image_check.cluster_image_reason)
        return {**renv, "image_uri": parse_reference(spec.image).full}
    if spec.run:
        if spec.workdir:
            renv["working_dir"] = spec.workdir
            renv["excludes"] = EXCLUDES
        renv["py_modules"] = [str(JOBS_DIR)]  # so any script can `from jobs.metrics import report`
    else:
        renv["working_dir"] = _staged_jobs_dir()
    # a cloud node's boot installed the job's requirements into the node's venv (and the planned torch from
    # its wheel index): a pip runtime_env there would only make Ray clone that venv (GBs) for each job; here
    # too, unless this Python lacks one of them (local_requirements.py)
    if local and spec.requirements and not image and unmet_requirements(list(spec.requirements)):
        renv["pip"] = list(spec.requirements)
    return renv
