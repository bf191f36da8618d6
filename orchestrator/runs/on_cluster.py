"""An attempt once its cluster is up: connect, submit (unless re-attaching), watch until the job ends,
then stop what is left of the Ray job, terminate the cluster and record what it cost.

The Ray job is stopped before teardown when the ending says it may still run (states.Ending.stops_job):
a preemption, the budget, or dlrun itself stopping (an exception: Ending.INTERRUPTED).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from orchestrator.cost import CostMeter, node_seconds_cost
from orchestrator.paths import job_log_path
from orchestrator.runs import sigterm
from orchestrator.runs.watch import Outcome, Watcher
from orchestrator.settings import env_float
from orchestrator.states import Ending, JobStatus, RayJobStatus

if TYPE_CHECKING:
    from infra.base import Cluster, Connection, Provider, ProviderError
    from orchestrator.runs.context import AttemptContext
    from orchestrator.runs.ray_jobs import JobsClient
    from orchestrator.state.db import Store


class ClusterRun:
    """One attempt's time on one cluster: what it opened (heartbeat, connection, Jobs client), so that
    tear_down closes exactly that."""

    def __init__(self, ctx: AttemptContext, provider: Provider, cluster: Cluster, *, started: float,
                 previous: float, price_all: float, submission_id: str | None = None):
        self.ctx, self.provider, self.cluster = ctx, provider, cluster
        self.started, self.previous, self.price_all = started, previous, price_all
        self.submission_id = submission_id
        self.beats: Heartbeat | None = None
        self.connection: Connection | None = None
        self.jobs: JobsClient | None = None

    def run(self, submission: dict | None) -> Outcome:
        """Watch the job to its end and tear down, whatever happens (an exception: INTERRUPTED)."""
        try:
            outcome = self._watch(submission)
        except BaseException:
            self.tear_down(Ending.INTERRUPTED)
            raise
        self.tear_down(outcome.kind)
        return outcome

    def _watch(self, submission: dict | None) -> Outcome:
        """The job's outcome; NOT_READY (with the ProviderError) when the head never answered (a failed
        boot): the run loop then tries the next candidate, as after a failed launch."""
        from infra.base import ProviderError

        ctx, store, job_id = self.ctx, self.ctx.store, self.ctx.job_id
        ctx.view.phase = "bootstrapping"
        ctx.display.update(ctx.view)
        self.beats = Heartbeat(self.provider, self.cluster).start()  # a boot that outlasts the limit is not idle
        try:
            self.connection = self.provider.connect(self.cluster)
        except ProviderError as e:
            return Outcome.not_ready(e)
        address = self.connection.address
        self.jobs = jobs = ctx.jobs_client(address) if ctx.jobs_client else _ray_jobs(address,
                                                                                      self.connection.headers)
        if submission is not None:
            self.submission_id = submission["submission_id"]
            refused = _submit(jobs, submission, address, self.cluster)
            if refused is not None:
                return Outcome.not_ready(refused)
            store.mark_submitted(job_id, submission["submission_id"], address)
        else:
            store.set_ray_address(job_id, address)
        assert self.submission_id is not None  # re-attaching: the one the store recorded
        provider, cluster = self.provider, self.cluster
        watcher = Watcher(jobs=jobs, submission_id=self.submission_id, view=ctx.view, display=ctx.display,
                          meter=CostMeter(self.previous, self.price_all, self.started),
                          node_states=(lambda: provider.status(cluster)) if provider.capabilities.billed else None,
                          on_event=lambda kind, detail: _on_event(store, job_id, kind, detail),
                          max_cost=ctx.spec.budget.max_cost, poll_s=ctx.poll_s, node_poll_s=ctx.node_poll_s,
                          confirm_cancel=lambda: sigterm.received() or ctx.display.confirm_cancel(),
                          clock=ctx.clock, log_path=job_log_path(job_id))
        return watcher.run()

    def tear_down(self, ending: Ending) -> None:
        ctx = self.ctx
        ctx.view.phase = "tearing down"
        ctx.display.update(ctx.view)
        if self.jobs is not None and self.submission_id and ending.stops_job:
            self.jobs.stop(self.submission_id)  # the job writes no more; its checkpoints stay where they are
        stop_at = ctx.clock()
        if self.beats is not None:
            self.beats.stop()
        if self.connection is not None:
            self.connection.close()
        self.provider.terminate(self.cluster)
        record_teardown(ctx, self.cluster.cluster_id, self.previous, self.started, self.price_all, stop_at)


def record_teardown(ctx: AttemptContext, cluster_id: str, previous: float, started: float, price_all: float,
                    stop_at: float | None = None) -> None:
    """The attempt's cost (node-seconds × the price stored at launch, up to stop_at) and its cluster gone."""
    stop_at = ctx.clock() if stop_at is None else stop_at
    ctx.store.set_actual_cost(ctx.job_id, previous + node_seconds_cost(price_all, started, stop_at))
    ctx.store.cluster_terminated(cluster_id)


def provider_cleanup(provider: Provider, cluster_id: str) -> None:
    """Remove a cluster known only by its id (the launch never returned): found by its tags."""
    for owned in provider.list_owned():
        if owned.cluster_id == cluster_id:
            provider.terminate(owned)


class Heartbeat:
    """Beats the cluster's watchdog every interval while this attempt watches it (a thread)."""

    def __init__(self, provider: Provider, cluster: Cluster, interval_s: float | None = None):
        self.provider, self.cluster = provider, cluster
        self.interval_s = interval_s if interval_s is not None else env_float("DLRUN_HEARTBEAT_S")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"heartbeat-{cluster.cluster_id}")

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.provider.heartbeat(self.cluster)
            except Exception:  # a missed beat is not an error: the watchdog allows many minutes
                pass

    def stop(self) -> None:
        self._stop.set()


def _submit(jobs: JobsClient, submission: dict, address: str, cluster: Cluster) -> ProviderError | None:
    """Submit the job (the client retries while the head is not ready yet). A head that never took it is a
    failed boot (NOT_READY: the next candidate); a refused token is a credentials error; any other refusal
    (Ray's 400 to a bad request) fails the job in one line."""
    from infra.base import CredentialsError, ProvisionError
    from orchestrator.errors import JobFailedError
    from orchestrator.runs.ray_jobs import JobsApiError, not_ready_yet

    try:
        jobs.submit(**submission)
        return None
    except JobsApiError as e:
        log = cluster.extra.get("head_log")
        hint = f"; see {log}" if log else ""
        if e.status in (401, 403):
            return CredentialsError(f"{e}{hint}", cloud=cluster.provider)
        if not_ready_yet(e):
            return ProvisionError(f"the Ray head at {address} did not take the job ({e}){hint}",
                                  cloud=cluster.provider)
        raise JobFailedError(f"the Ray head at {address} refused the job: {e}{hint}") from None


def _ray_jobs(address: str, headers: dict[str, str]) -> JobsClient:
    from orchestrator.runs.ray_jobs import RayJobs

    return RayJobs(address, headers)


def _on_event(store: Store, job_id: str, kind: str, detail: dict) -> None:
    if kind == "ray_status" and detail.get("status") == RayJobStatus.RUNNING:
        store.set_status(job_id, JobStatus.RUNNING)
    elif kind == "epoch":
        store.set_metrics(job_id, detail)
    else:
        store.add_event(job_id, kind, detail)
