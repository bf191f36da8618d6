"""Where a job's Ray dashboard is, seen from this machine: its head's own URL (this machine's head, a
team cluster's), or an SSH tunnel to a cloud head; and the one-use link that logs a browser in to it."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.errors import UsageError

if TYPE_CHECKING:
    from infra.base import Connection
    from orchestrator.state.db import Store
    from orchestrator.state.records import JobRecord


@dataclass
class Dashboard:
    url: str             # the page to show: the job's page on the dashboard, or the dashboard
    base: str            # the dashboard itself
    tunnel: Connection | None = None  # open to a cloud head: close it when done
    foreign_head: bool = False  # this machine's head is not one dlrun started (dlrun attaches to it)


def find_dashboard(store: Store, job_id: str | None) -> Dashboard:
    """JOB's dashboard (opening a tunnel to a cloud head), or the local head's without a job.
    UsageError: no such job, its cluster is gone, or no dashboard is up."""
    if not job_id:
        from orchestrator.runs.teardown import local_head

        url, ours = local_head()
        if not url:
            raise _nothing_up()
        return Dashboard(url, url, foreign_head=not ours)
    job = store.get_job(job_id)
    if job is None:
        raise UsageError(f"no job '{job_id}'; `dlrun status` lists them")
    url, tunnel = job.ray_address, None
    if job.backend:
        from infra import capabilities

        if capabilities(job.backend).remote:
            tunnel = _tunnel(store, job)
            url = tunnel.address
    if not url:
        raise _nothing_up()
    page = f"{url}/#/jobs/{job.ray_submission_id}" if job.ray_submission_id else url
    return Dashboard(page, url, tunnel)


def _tunnel(store: Store, job: JobRecord) -> Connection:
    cluster = store.get_cluster(job.cluster_id) if job.cluster_id else None
    if not cluster or cluster.terminated or not cluster.cluster_json:
        raise UsageError(f"job {job.id}'s cluster is gone; its record: `dlrun status {job.id}`")
    from infra import get_provider
    from infra.base import Cluster

    return get_provider(cluster.provider).connect(Cluster.from_dict(json.loads(cluster.cluster_json)))


def _nothing_up() -> UsageError:
    return UsageError("no Ray dashboard is up: no local Ray head answers; `dlrun submit` starts one")


def login_link(dashboard: Dashboard):
    """A started LoginLink to the dashboard's page with the token dlrun holds for that head (a cloud
    cluster's, or its own local head's), or None: a head dlrun did not start (its token is the user's
    business), or one elsewhere than this machine's loopback."""
    from infra.local.head import local_head_headers
    from infra.login import LoginLink, can_log_in

    headers = dashboard.tunnel.headers if dashboard.tunnel is not None else local_head_headers(dashboard.base)
    token = (headers or {}).get("Authorization", "").removeprefix("Bearer ").strip()
    if not token or not can_log_in(dashboard.url):
        return None
    return LoginLink(dashboard.url, token).start()


def wait_for_login(login) -> None:
    """Serve the link until it is opened (or it expires, or Ctrl-C), then stop serving it."""
    try:
        login.wait()
    except KeyboardInterrupt:
        pass
    finally:
        login.close()


def hold_open(tunnel: Connection) -> None:
    """Keep the tunnel to a cloud head open until Ctrl-C, then close it."""
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        tunnel.close()
