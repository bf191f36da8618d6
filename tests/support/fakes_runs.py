"""Fakes at the boundaries of the job run loop (no Ray head, no cloud), shared by test_run_loop and test_watch.

    FakeClock        a callable clock that moves only when told (FakeJobs.status moves it one poll)
    FakeBackend      an infra.base.Provider (aws/gcp, the registry's real capabilities) driven by a launch
                     script; records every call, so a test can check that nothing was left behind
    FakeJobs         the Ray Jobs API of one cluster (ray_jobs.JobsClient), driven by a status script; logs
                     grow as it goes
    JobsFactory      address -> FakeJobs, one per attempt (execute's `jobs_client`)
    RecordingDisplay what the run loop showed
    left_running     the store as a supervisor killed mid-watch leaves it (for re-attaching)
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass

from infra import capabilities
from infra.base import Cluster, Connection, Node, NodeState, Provider
from orchestrator.runs.ray_jobs import JobInfo
from orchestrator.states import RayJobStatus


def metric(**data) -> str:
    return "DLRUN_METRIC " + json.dumps(data, separators=(",", ":"))


def result(**data) -> str:
    return "DLRUN_RESULT " + json.dumps(data, separators=(",", ":"))


class FakeClock:
    def __init__(self, start: float = 1_700_000_000.0):
        self.t = float(start)

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class RecordingDisplay:
    def __init__(self, cancel: bool = True):
        self.updates: list[str] = []
        self.logs: list[str] = []
        self.messages: list[str] = []
        self.cancel = cancel
        self.cancel_asked = 0

    def update(self, view) -> None:
        self.updates.append(view.phase)

    def log(self, line: str) -> None:
        self.logs.append(line)

    def message(self, text: str) -> None:
        self.messages.append(text)

    def confirm_cancel(self) -> bool:
        self.cancel_asked += 1
        return self.cancel


# --- the provider ---------------------------------------------------------------------------------

@dataclass
class Up:
    """A launch that succeeds. preempt_after: from this status() call on (1-based) the nodes are
    'preempted'; status_errors: the status() calls that raise (the provider's API is down)."""

    preempt_after: int | None = None
    status_errors: tuple[int, ...] = ()
    lost_status: str = "preempted"


class Leak:
    """A launch that creates the cluster (found later by list_owned) and then fails with `error`."""

    def __init__(self, error: BaseException):
        self.error = error


class FakeBackend(Provider):
    """`script`: a list consumed one item per launch (then `default`), or a dict offer key -> item,
    or a callable(request) -> item. An item is an exception to raise, an Up, or a Leak.

    As the real providers do: launch() is idempotent by cluster id only in that a Leak leaves a cluster
    that list_owned() finds; terminate() is safe twice; status() says `gone` for a terminated cluster.
    Not reproduced: cloud latency, partial node failures within a launch, the watchdog heartbeat's effect.
    submission_extras and kept_resources are the contract's defaults (a backend of dlrun's own clusters that
    keeps nothing between them)."""

    def __init__(self, name: str, script=None, *, default=None, clock: FakeClock | None = None,
                 launch_seconds: float = 0.0, launched_at_offset: float = 0.0, connect_errors=(),
                 preflight_error=None):
        self.name = name
        self.preflight_error = preflight_error  # raised by preflight(): no credentials, no SSH address
        self.preflights = 0
        self.capabilities = capabilities(name)
        self.script = script if script is not None else []
        self.default = default if default is not None else Up()
        # launch() takes launch_seconds of the fake clock; the cloud reports the instances' launch time
        # (Cluster.launched_at, wall clock) launched_at_offset seconds after launch() was called
        self.clock, self.launch_seconds, self.launched_at_offset = clock, launch_seconds, launched_at_offset
        self.connect_errors = list(connect_errors)  # raised by the next connect() calls, one each
        self.requests = []          # every ClusterRequest passed to launch
        self.launched: list[str] = []   # cluster ids that came up (launch returned, or Leak)
        self.live: dict[str, Cluster] = {}
        self.behaviour: dict[str, Up] = {}
        self.status_calls: Counter = Counter()
        self.status_times: list[float] = []
        self.terminated: list[str] = []
        self.connections: list[Connection] = []
        self.closed: list[str] = []
        self.list_owned_calls = 0
        self.heartbeats = 0

    def preflight(self) -> None:
        self.preflights += 1
        if self.preflight_error is not None:
            raise self.preflight_error

    def heartbeat(self, cluster: Cluster) -> None:
        self.heartbeats += 1

    def _next(self, request):
        if callable(self.script):
            return self.script(request)
        if isinstance(self.script, dict):
            return self.script.get(request.offer.key, self.default)
        return self.script.pop(0) if self.script else self.default

    def _cluster(self, request, launched_at: float | None = None) -> Cluster:
        o = request.offer
        nodes = [Node(f"{request.cluster_id}-n{i}", private_ip=f"10.0.0.{i + 2}", zone=f"{o.region}-a",
                      is_head=i == 0) for i in range(request.num_nodes)]
        return Cluster(cluster_id=request.cluster_id, provider=self.name, region=o.region, zone=f"{o.region}-a",
                       instance_type=o.instance_type, spot=request.spot, price_per_hour=o.hourly(request.spot),
                       nodes=nodes, job_id=request.job_id,
                       launched_at=time.time() if launched_at is None else launched_at)

    def launch(self, request) -> Cluster:
        launched_at = time.time() + self.launched_at_offset
        self.requests.append(request)
        if self.clock is not None:
            self.clock.advance(self.launch_seconds)
        item = self._next(request)
        if isinstance(item, Leak):
            self.launched.append(request.cluster_id)
            self.live[request.cluster_id] = self._cluster(request, launched_at)
            raise item.error
        if isinstance(item, BaseException):
            raise item
        cluster = self._cluster(request, launched_at)
        self.launched.append(cluster.cluster_id)
        self.live[cluster.cluster_id] = cluster
        self.behaviour[cluster.cluster_id] = item
        return cluster

    def status(self, cluster: Cluster) -> list[NodeState]:
        cid = cluster.cluster_id
        self.status_calls[cid] += 1
        n = self.status_calls[cid]
        if self.clock is not None:
            self.status_times.append(self.clock())
        if cid not in self.live:
            return [NodeState(node.node_id, "gone") for node in cluster.nodes]
        b = self.behaviour.get(cid, Up())
        if n in b.status_errors:
            raise RuntimeError(f"{self.name} API unavailable (call {n})")
        lost = b.preempt_after is not None and n >= b.preempt_after
        return [NodeState(node.node_id, b.lost_status if lost else "running", "spot reclaimed" if lost else "")
                for node in cluster.nodes]

    def connect(self, cluster: Cluster) -> Connection:
        if self.connect_errors:
            raise self.connect_errors.pop(0)
        cid = cluster.cluster_id
        conn = Connection("http://fake-head", on_close=lambda: self.closed.append(cid))
        self.connections.append(conn)
        return conn

    def terminate(self, cluster: Cluster) -> None:
        self.terminated.append(cluster.cluster_id)
        self.live.pop(cluster.cluster_id, None)

    def list_owned(self) -> list[Cluster]:
        self.list_owned_calls += 1
        return list(self.live.values())

    def offers(self):  # the Provider protocol; the planner reads the catalog, not this
        return []

    def assert_clean(self) -> None:
        """Every cluster that came up was terminated exactly once; every connection was closed once."""
        counts = Counter(self.terminated)
        assert sorted(counts) == sorted(self.launched), (self.launched, self.terminated)
        assert all(v == 1 for v in counts.values()), counts
        assert not self.live, self.live
        assert len(self.closed) == len(self.connections), (self.closed, self.connections)
        assert all(c._on_close is None for c in self.connections)  # Connection.close() ran


def left_running(store, job_id: str, offer, cluster: Cluster, *, launched_at: float) -> None:
    """The store as a supervisor killed mid-watch leaves it, written as run_attempt writes it: attempt 1 on
    `offer` with `cluster` up since `launched_at`, its Ray job submitted (the job's status is the test's)."""
    store.start_attempt(job_id, attempt=1, backend=cluster.provider, offer_key=offer.key,
                        instance_type=cluster.instance_type, accelerator=offer.accelerator or "CPU",
                        accelerator_count=offer.accelerator_count, spot=cluster.spot,
                        price_per_hour=cluster.price_per_hour * len(cluster.nodes), price_date=None,
                        cluster_id=cluster.cluster_id)
    store.cluster_launching(cluster.cluster_id, provider=cluster.provider, job_id=job_id, region=cluster.region,
                            instance_type=cluster.instance_type, spot=cluster.spot, num_nodes=len(cluster.nodes),
                            price_per_hour=cluster.price_per_hour, launched_at=launched_at)
    store.cluster_up(cluster.cluster_id, zone=cluster.zone, launched_at=launched_at,
                     cluster_json=json.dumps(cluster.to_dict()))
    store.mark_submitted(job_id, f"dlrun-{job_id}-1", "http://fake-head")


def providers(*backends: FakeBackend):
    """execute's get_provider over these backends (an unknown name is a test error)."""
    by_name = {b.name: b for b in backends}
    return lambda name: by_name[name]


# --- the Ray Jobs API -----------------------------------------------------------------------------

class FakeJobs:
    """`script`: one step per status() call, then the last step's status forever. A step is a status
    string, an exception to raise, or (status_or_exception, log text appended at that poll).
    Every status() call first moves the clock by `dt` seconds (the time between two polls).

    As Ray's Jobs API (ray_jobs.RayJobs): start_time/end_time in ms, set when the job runs/ends; a job
    that failed has driver_exit_code `exit_code` and Ray's message `message`; stop() of any job answers True.
    `submit_error`: what submit() raises instead, as RayJobs.submit raises once its own retries of a head
    that is not ready yet ran out (a JobsApiError without status: no answer) or at once (Ray's 400).
    Not reproduced: package uploads, the not-ready retries themselves (tests/integration/test_ray_jobs.py
    runs the real client against a head that refuses), 401/403 answers."""

    def __init__(self, address: str, script, clock: FakeClock, dt: float = 60.0, on_status=None,
                 submit_error: BaseException | None = None):
        self.address = address
        self.submit_error = submit_error
        self.script = list(script)
        self.clock, self.dt = clock, dt
        self.on_status = on_status  # called with (self, poll number) after each status()
        self.text = ""
        self.polls = 0
        self.submitted: list[dict] = []
        self.stopped: list[str] = []
        self.logs_calls = 0
        self.tails = 0
        self.chars_read = 0  # characters handed out by tails: each one once
        self.logs_error: BaseException | None = None
        self.start_ms: float | None = None
        self.end_ms: float | None = None
        self.exit_code: int | None = None  # the driver's, reported once the job failed
        self.message: str | None = None  # Ray's message of the job, reported once it failed
        self.last = RayJobStatus.PENDING  # the status the last status() call answered

    def submit(self, **kw) -> str:
        if self.submit_error is not None:
            raise self.submit_error
        self.submitted.append(kw)
        return kw["submission_id"]

    def _step(self, i: int):
        step = self.script[min(i, len(self.script) - 1)]
        what, text = step if isinstance(step, tuple) else (step, "")
        return what, (text if i < len(self.script) else "")

    def status(self, submission_id: str) -> RayJobStatus:
        self.clock.advance(self.dt)
        what, text = self._step(self.polls)
        self.polls += 1
        if text:
            self.text += text if text.endswith("\n") or not text else text + "\n"
        if self.on_status is not None:
            self.on_status(self, self.polls)
        if isinstance(what, BaseException):
            raise what
        status = RayJobStatus(what)
        if status == RayJobStatus.RUNNING and self.start_ms is None:
            self.start_ms = self.clock() * 1000
        if status.terminal and self.end_ms is None:
            self.end_ms = self.clock() * 1000
            self.start_ms = self.start_ms if self.start_ms is not None else self.end_ms
        self.last = status
        return status

    def logs(self, submission_id: str) -> str:
        self.logs_calls += 1
        if self.logs_error is not None:
            raise self.logs_error
        return self.text

    def tail(self, submission_id: str) -> "FakeTail":
        self.tails += 1
        self.tail_opened_at = self.polls
        return FakeTail(self)

    def stop(self, submission_id: str) -> bool:
        self.stopped.append(submission_id)
        return True

    def info(self, submission_id: str) -> JobInfo:
        return JobInfo(submission_id, self.last, start_time=_ms(self.start_ms), end_time=_ms(self.end_ms),
                       driver_exit_code=self.exit_code if self.last == RayJobStatus.FAILED else None,
                       message=self.message if self.last == RayJobStatus.FAILED else None)


def _ms(t: float | None) -> int | None:
    return None if t is None else round(t)


class FakeTail:
    """RayJobs.tail() over a FakeJobs's growing text: read() hands out what is new, each character once;
    a read raises FakeJobs.logs_error while it is set (nothing is lost: the next read gets it)."""

    def __init__(self, jobs: FakeJobs):
        self.jobs, self.pos, self.ended, self.closed = jobs, 0, False, False

    def read(self) -> str:
        if self.jobs.logs_error is not None:
            raise self.jobs.logs_error
        out, self.pos = self.jobs.text[self.pos:], len(self.jobs.text)
        self.jobs.chars_read += len(out)
        return out

    def finish(self) -> str:
        return self.read()

    def close(self) -> None:
        self.closed = True


class RawLogJobs(FakeJobs):
    """FakeJobs whose log text is appended verbatim (no newline added): partial lines are possible."""

    def status(self, submission_id: str) -> RayJobStatus:
        self.clock.advance(self.dt)
        what, text = self._step(self.polls)
        self.polls += 1
        self.text += text
        if isinstance(what, BaseException):
            raise what
        self.last = RayJobStatus(what)
        return self.last


class JobsFactory:
    """execute's jobs_client: one FakeJobs per attempt, each with the next script (then the last).
    dt: seconds between two polls, or a list of them, one per attempt (then the last).
    submit_errors: what each attempt's submit() raises, in turn (then none)."""

    def __init__(self, clock: FakeClock, *scripts, dt: float = 60.0, on_status=None,
                 submit_errors: tuple[BaseException, ...] = ()):
        self.clock, self.scripts, self.dt, self.on_status = clock, list(scripts), dt, on_status
        self.submit_errors = list(submit_errors)
        self.clients: list[FakeJobs] = []

    def __call__(self, address: str) -> FakeJobs:
        script = self.scripts[min(len(self.clients), len(self.scripts) - 1)]
        dts = self.dt if isinstance(self.dt, (list, tuple)) else [self.dt]
        dt = dts[min(len(self.clients), len(dts) - 1)]
        error = self.submit_errors[len(self.clients)] if len(self.clients) < len(self.submit_errors) else None
        client = FakeJobs(address, script, self.clock, dt, self.on_status, submit_error=error)
        self.clients.append(client)
        return client
