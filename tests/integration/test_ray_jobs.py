"""dlrun's Jobs API client (orchestrator/runs/ray_jobs.py, packages.py) against a fake job head over HTTP:
the requests it sends, the packages it reuses by fingerprint instead of importing Ray's SDK, its errors."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.runs import packages
from orchestrator.runs.ray_jobs import JobsApiError, RayJobs


# Ray 2.60's job head answers a second POST of one submission_id with its own traceback around its job
# agent's (ray/dashboard/modules/job/job_head.py submit_job, job_agent.py, job_manager.py submit_job)
DUPLICATE = ("Traceback (most recent call last):\n  File \"job_head.py\", line 421, in submit_job\n"
             "RuntimeError: Request failed with status code 400: Traceback (most recent call last):\n"
             "  File \"job_manager.py\", line 553, in submit_job\nValueError: Job with submission_id {} already "
             "exists. Please use a different submission_id.\n.")


class FakeHead:
    """Answers like Ray's job head: /api/jobs/ (POST), /api/jobs/{id} (GET), .../stop, /api/packages/...
    A POST of a submission_id it holds is refused as Ray refuses it (DUPLICATE, 500).
    `refusals`: how the next POSTs to /api/jobs/ are refused while the head starts, one each: "agent" (Ray's
    500 "No available agent ..." before the job agent registered), "closed" (the connection closed without
    an answer, as aiohttp does while the dashboard starts or restarts: "Remote end closed connection without
    response"), "503" (a proxy in front of a head not up yet), "taken" (the job is taken but the answer is
    lost: closed before it is sent). Not reproduced: the job running."""

    def __init__(self):
        self.requests: list[tuple[str, str, dict, bytes]] = []
        self.packages: set[str] = set()
        self.refusals: list[str] = []
        self.jobs: set[str] = set()
        head = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                head.requests.append((self.command, self.path, dict(self.headers), body))
                return body

            def do_GET(self):
                self._record()
                if self.path.startswith("/api/packages/gcs/"):
                    name = self.path.rsplit("/", 1)[1]
                    return self._answer(200 if name in head.packages else 404, "")
                if self.path == "/api/jobs/s-1":
                    return self._answer(200, {"submission_id": "s-1", "status": "FAILED", "start_time": 1000,
                                              "end_time": 4500, "driver_exit_code": 3, "message": "boom"})
                return self._answer(404, "Job s-2 does not exist")

            def do_POST(self):
                body = self._record()
                if self.path == "/api/jobs/":
                    answer = head.submission(json.loads(body)["submission_id"])
                    if answer is None:
                        self.close_connection = True  # no status line: the client reads an empty answer
                        return
                    return self._answer(*answer)
                if self.path.endswith("/stop"):
                    return self._answer(200, {"stopped": True})
                return self._answer(404, "")

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def submission(self, sid: str) -> tuple[int, object] | None:
        """The answer to a POST of `sid` (status, body), or None: the connection closed without one."""
        refusal = self.refusals.pop(0) if self.refusals else ""
        if refusal == "agent":
            return 500, "No available agent to submit job, please try again later."
        if refusal == "503":
            return 503, "Service Unavailable"
        if refusal in ("closed", "taken"):
            self.jobs |= {sid} if refusal == "taken" else set()
            return None
        if sid in self.jobs:
            return 500, DUPLICATE.format(sid)
        self.jobs.add(sid)
        return 200, {"submission_id": sid, "job_id": None}


@pytest.fixture
def head():
    h = FakeHead()
    yield h
    h.server.shutdown()


@pytest.fixture
def workdir(tmp_path):
    wd = tmp_path / "wd"
    (wd / "pkg").mkdir(parents=True)
    (wd / "train.py").write_text("print('hi')\n")
    (wd / "pkg" / "a.py").write_text("A = 1\n")
    (wd / ".git").mkdir()
    (wd / ".git" / "HEAD").write_text("ref\n")
    return wd


def test_info_status_stop_and_errors(head):
    jobs = RayJobs(head.url, headers={"Authorization": "Bearer t"})
    info = jobs.info("s-1")
    assert (info.status, info.start_time, info.end_time, info.driver_exit_code) == ("FAILED", 1000, 4500, 3)
    assert jobs.status("s-1") == "FAILED"
    assert [p for m, p, _, _ in head.requests].count("/api/jobs/s-1") == 1  # a terminal job is asked once
    assert jobs.stop("s-1") is True
    assert all(h.get("Authorization") == "Bearer t" for _, _, h, _ in head.requests)
    with pytest.raises(JobsApiError, match="404 Job s-2 does not exist"):
        jobs.status("s-2")


def test_no_answer_is_an_error_that_names_the_head():
    from infra.reach import free_port

    with pytest.raises(JobsApiError, match="no answer from the Ray head at http://127.0.0.1"):
        RayJobs(f"http://127.0.0.1:{free_port()}", headers={}).status("s-1")


def test_a_known_package_is_named_without_building_it(head, workdir, monkeypatch):
    jobs = RayJobs(head.url, headers={})
    monkeypatch.setattr(packages, "upload_with_ray",
                        lambda jobs, env, log=None: env.update(working_dir="gcs://_ray_pkg_abc.zip"))
    env = {"working_dir": str(workdir), "excludes": [".git"], "env_vars": {"A": "1"}}

    jobs.submit(entrypoint="python train.py", submission_id="s-9", runtime_env=env, metadata={"n": 1})
    head.packages.add("_ray_pkg_abc.zip")
    monkeypatch.setattr(packages, "upload_with_ray", lambda *a, **k: pytest.fail("built again"))
    (workdir / ".git" / "HEAD").write_text("another commit\n")  # excluded: the package is the same
    jobs.submit(entrypoint="python train.py", submission_id="s-10", runtime_env=env, metadata={"n": 1})

    posts = [json.loads(b) for m, p, _, b in head.requests if m == "POST" and p == "/api/jobs/"]
    assert [p["submission_id"] for p in posts] == ["s-9", "s-10"]
    assert all(p["runtime_env"]["working_dir"] == "gcs://_ray_pkg_abc.zip" for p in posts)
    assert posts[1] == {"entrypoint": "python train.py", "submission_id": "s-10", "metadata": {"n": "1"},
                        "runtime_env": {"working_dir": "gcs://_ray_pkg_abc.zip", "excludes": [".git"],
                                        "env_vars": {"A": "1"}}}
    assert env["working_dir"] == str(workdir)  # the caller's runtime_env is left as it was


def test_a_changed_file_or_a_head_without_the_package_builds_it_again(head, workdir, monkeypatch):
    built = []
    monkeypatch.setattr(packages, "upload_with_ray",
                        lambda jobs, env, log=None: built.append(1) or env.update(working_dir=f"gcs://_ray_pkg_{len(built)}.zip"))
    jobs = RayJobs(head.url, headers={})
    env = {"working_dir": str(workdir)}
    jobs.submit(entrypoint="x", submission_id="a", runtime_env=env, metadata={})
    jobs.submit(entrypoint="x", submission_id="b", runtime_env=env, metadata={})  # the head lacks it
    head.packages.add("_ray_pkg_2.zip")
    (workdir / "pkg" / "a.py").write_text("A = 22\n")
    jobs.submit(entrypoint="x", submission_id="c", runtime_env=env, metadata={})
    assert len(built) == 3


def posts(head) -> list[str]:
    return [json.loads(b)["submission_id"] for m, p, _, b in head.requests if m == "POST" and p == "/api/jobs/"]


def test_a_head_that_refuses_while_it_starts_is_asked_again(head, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    head.refusals = ["closed", "agent", "503", "agent"]
    assert RayJobs(head.url, headers={}).submit(entrypoint="x", submission_id="s-3", runtime_env={},
                                               metadata={}) == "s-3"
    assert posts(head) == ["s-3"] * 5 and head.jobs == {"s-3"}


def test_a_job_taken_whose_answer_was_lost_is_not_submitted_twice(head, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    head.refusals = ["taken"]
    assert RayJobs(head.url, headers={}).submit(entrypoint="x", submission_id="s-4", runtime_env={},
                                               metadata={}) == "s-4"
    assert posts(head) == ["s-4", "s-4"] and head.jobs == {"s-4"}


def test_a_duplicate_on_the_first_try_is_an_error_with_rays_reason(head):
    head.jobs.add("s-5")
    with pytest.raises(JobsApiError, match=r"500 ValueError: Job with submission_id s-5 already exists"):
        RayJobs(head.url, headers={}).submit(entrypoint="x", submission_id="s-5", runtime_env={}, metadata={})


def test_a_head_that_never_gets_ready_is_an_error_after_the_wait(head):
    head.refusals = ["closed"] * 100
    with pytest.raises(JobsApiError, match="no answer from the Ray head") as e:
        RayJobs(head.url, headers={}).submit(entrypoint="x", submission_id="s-6", runtime_env={}, metadata={},
                                             ready_wait_s=1.5)
    assert e.value.status is None and 2 <= len(posts(head)) <= 4


def test_a_head_wanting_a_token_says_so(monkeypatch, tmp_path):
    from orchestrator.runs.ray_jobs import _default_headers

    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    (tmp_path / "tok").write_text("s3cret\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "tok"))
    assert _default_headers("http://127.0.0.1:1") == {"Authorization": "Bearer s3cret"}
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert _default_headers("http://127.0.0.1:1") == {}
