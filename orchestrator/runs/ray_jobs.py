"""The Ray Jobs API of one cluster, spoken over plain HTTP (the REST API Ray's JobSubmissionClient uses).

Importing Ray's SDK costs about a second (ray, aiohttp, its pydantic models) for a handful of JSON
requests, so dlrun speaks them itself: submit, status, info, stop, list, the whole log, and the log
as it grows (Ray's websocket tail, log_tail.py). Only building and uploading a working_dir package
that the head does not hold yet goes through Ray's own packaging code (packages.py).
"""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

from orchestrator.runs.packages import ray_version, resolve_packages  # noqa: F401  (ray_version: one home)
from orchestrator.states import RayJobStatus


class JobsApiError(RuntimeError):
    """The head answered with an error (status and Ray's text), or did not answer (status None)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


SUBMIT_READY_WAIT_S = 120.0  # how long a submission is retried while the head says it is not ready yet
# what a head that has just come up answers while it is not ready: nothing (a port not bound yet, a connection
# closed or reset while its dashboard starts), a proxy's 502/503/504, or Ray's 500 before its job agent
# registered (ray/dashboard/modules/job/job_head.py submit_job)
NOT_READY_STATUSES = (502, 503, 504)
NOT_READY_TEXT = "No available agent"


def not_ready_yet(e: JobsApiError) -> bool:
    """The head refused or did not answer because it is still starting: asking again later may succeed."""
    return e.status is None or e.status in NOT_READY_STATUSES or NOT_READY_TEXT in str(e)


@dataclass
class JobInfo:
    """What GET /api/jobs/{id} says of a job (times in ms since the epoch, as Ray gives them)."""
    submission_id: str
    status: RayJobStatus
    message: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    driver_exit_code: int | None = None
    entrypoint: str = ""
    metadata: dict = field(default_factory=dict)
    runtime_env: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict) -> "JobInfo":
        return cls(submission_id=d.get("submission_id") or d.get("job_id") or "", status=RayJobStatus(d.get("status")),
                   message=d.get("message"), start_time=d.get("start_time"), end_time=d.get("end_time"),
                   driver_exit_code=d.get("driver_exit_code"), entrypoint=d.get("entrypoint") or "",
                   metadata=d.get("metadata") or {}, runtime_env=d.get("runtime_env") or {})


RUNTIME_ENV_FAILED = "runtime_env setup failed"  # how Ray's message of such a job starts (ray 2.60 job_manager.py)


def setup_failure(message: str | None) -> str:
    """One line of Ray's message for a job whose runtime env could not be set up, so its driver never ran (e.g.
    an image_uri job on a node without podman): Ray's words, the node and the error's last line, as in
    "runtime_env setup failed on node 10.77.0.4: FileNotFoundError: [Errno 2] No such file or directory:
    'podman'"; "" for any other message."""
    if not message or not message.startswith(RUNTIME_ENV_FAILED):
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    node = re.search(r"\[Node ([^\]]+)\]", message)
    return f"{RUNTIME_ENV_FAILED}{f' on node {node.group(1)}' if node else ''}: {lines[-1][:300]}"


class LogFollower(Protocol):
    """A job's log as it grows (log_tail.LogTail): each character handed out once."""

    ended: bool  # the head closed the stream: the job ended and all of its log arrived

    def read(self) -> str:
        """What arrived since the last read."""
        ...

    def finish(self) -> str:
        """The rest of the log, once the job ended."""
        ...

    def close(self) -> None:
        ...


class JobsClient(Protocol):
    """What the run loop asks of one cluster's Ray Jobs API (RayJobs; the tests' FakeJobs)."""

    def submit(self, *, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict,
               entrypoint_num_gpus: float | None = None, entrypoint_num_cpus: float | None = None,
               entrypoint_resources: dict | None = None) -> str:
        ...

    def status(self, submission_id: str) -> RayJobStatus:
        ...

    def info(self, submission_id: str) -> JobInfo:
        ...

    def tail(self, submission_id: str) -> LogFollower:
        ...

    def stop(self, submission_id: str) -> bool:
        ...


_ERROR_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit)\b")


def _gist(text: str) -> str:
    """Ray's error text in short: of a Python traceback (Ray's 400/500 answers carry one, the head's around
    its job agent's), the last exception's line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback"):
        errors = [line for line in lines if _ERROR_LINE.match(line)]
        return (errors or lines)[-1][:500]
    return text[:500]


def _default_headers(address: str) -> dict[str, str]:
    """The bearer token for `address`: dlrun's own local head's (infra.auth, where dlrun keeps one), a team
    cluster's of config.yaml (infra/ray_cluster), else
    the one Ray's clients would send (RAY_AUTH_MODE=token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token)."""
    try:
        from infra.auth import bearer, ray_env_token
        from infra.local.head import local_head_headers
    except ImportError:
        return {}
    headers = local_head_headers(address)
    if not headers:  # a team cluster of config.yaml (infra/ray_cluster): its token, read from its file now
        from infra.ray_cluster.settings import headers_for_address

        headers = headers_for_address(address)
    return headers or bearer(ray_env_token())


def _append_line(job_id: str):
    """A writer of lines to the job's log file (readable with `dlrun logs`)."""
    from orchestrator.paths import job_log_path

    path = job_log_path(job_id)

    def write(line: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(line.rstrip("\n") + "\n")
    return write


class RayJobs:
    """The Ray Jobs API of one cluster. `headers`: sent with every request (the cluster's Ray token);
    None: the token of dlrun's local head when `address` is that head."""

    def __init__(self, address: str, headers: dict[str, str] | None = None, timeout: float = 30.0):
        self.address = address.rstrip("/")
        self.headers = dict(headers or _default_headers(self.address))  # none given: the token Ray would send
        self.timeout = timeout
        self._ended: dict[str, JobInfo] = {}  # a job's info once it is terminal (it no longer changes)

    # --- HTTP --------------------------------------------------------------------------------------
    def request(self, method: str, path: str, *, body: bytes | None = None, json_body=None,
                ok=(200,)) -> tuple[int, bytes]:
        headers = dict(self.headers)
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.address + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
            if status in ok:
                return status, text.encode()
            if status in (401, 403):
                had = "its token was refused" if "Authorization" in self.headers else \
                    "it wants a token (RAY_AUTH_MODE=token with RAY_AUTH_TOKEN)"
                raise JobsApiError(f"the Ray head at {self.address} answered {status}: {had}", status) from None
            raise JobsApiError(f"Ray Jobs API {method} {path}: {status} {_gist(text)}", status) from None
        except (urllib.error.URLError, OSError) as e:
            reason = e.reason if isinstance(e, urllib.error.URLError) else e
            raise JobsApiError(f"no answer from the Ray head at {self.address}: {reason}") from None

    def _json(self, method: str, path: str, **kw):
        return json.loads(self.request(method, path, **kw)[1] or b"null")

    # --- the API -----------------------------------------------------------------------------------
    def submit(self, *, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict,
               entrypoint_num_gpus: float | None = None, entrypoint_num_cpus: float | None = None,
               entrypoint_resources: dict | None = None, ready_wait_s: float = SUBMIT_READY_WAIT_S,
               log=None) -> str:
        """Upload what the runtime_env ships (unless the head holds it already), then submit; a head that
        refuses because it is not ready yet (not_ready_yet) is asked again for up to ready_wait_s.
        log(line): where Ray's own messages about packages go (the job's log file), never the terminal."""
        if log is None and metadata.get("dlrun_job_id"):
            log = _append_line(metadata["dlrun_job_id"])
        env = resolve_packages(self, runtime_env, log=log)
        if isinstance(env.get("pip"), list):  # the form Ray's RuntimeEnv gives a list of requirements
            env["pip"] = {"packages": env["pip"], "pip_check": False}
        # Ray job metadata values must be strings
        meta = {str(k): str(v) for k, v in metadata.items() if v is not None}
        body = {k: v for k, v in dict(entrypoint=entrypoint, submission_id=submission_id, runtime_env=env,
                                      metadata=meta, entrypoint_num_gpus=entrypoint_num_gpus,
                                      entrypoint_num_cpus=entrypoint_num_cpus,
                                      entrypoint_resources=entrypoint_resources).items()
                if v is not None}
        deadline = time.monotonic() + ready_wait_s
        retried = False
        while True:
            try:
                return self._json("POST", "/api/jobs/", json_body=body)["submission_id"]
            except JobsApiError as e:
                if retried and "already exists" in str(e):
                    return submission_id  # an earlier try's POST was taken, its answer lost
                if not not_ready_yet(e) or time.monotonic() > deadline:
                    raise
                retried = True
                time.sleep(1.0)

    def info(self, submission_id: str) -> JobInfo:
        if submission_id in self._ended:
            return self._ended[submission_id]
        info = JobInfo.from_json(self._json("GET", f"/api/jobs/{quote(submission_id)}"))
        if info.status.terminal:
            self._ended[submission_id] = info
        return info

    def status(self, submission_id: str) -> RayJobStatus:
        return self.info(submission_id).status

    def logs(self, submission_id: str) -> str:
        """The whole log (one read; following a job uses tail())."""
        return self._json("GET", f"/api/jobs/{quote(submission_id)}/logs")["logs"]

    def tail(self, submission_id: str) -> LogFollower:
        """The log as it grows: a LogTail following Ray's websocket tail of the job's log."""
        from orchestrator.runs.log_tail import LogTail, websocket_text

        url = f"{self.address}/api/jobs/{quote(submission_id)}/logs/tail"
        return LogTail(lambda stop: websocket_text(url, self.headers, timeout=self.timeout, stop=stop),
                       lambda: self.logs(submission_id))

    def stop(self, submission_id: str) -> bool:
        try:
            return bool(self._json("POST", f"/api/jobs/{quote(submission_id)}/stop").get("stopped"))
        except Exception:
            return False

    def list(self) -> list[JobInfo]:
        return [JobInfo.from_json(d) for d in self._json("GET", "/api/jobs/")]

    # --- packages (packages.py) ----------------------------------------------------------------------
    def has_package(self, uri: str) -> bool:
        protocol, _, name = uri.partition("://")
        return self.request("GET", f"/api/packages/{protocol}/{name}", ok=(200, 404))[0] == 200
