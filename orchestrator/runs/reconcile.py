"""Jobs whose supervisor died (kill -9, a crashed terminal, a reboot) are picked up again.

A live job records the pid of the process running its lifecycle (the foreground `dlrun submit` or
the detached supervisor). When that process is gone, `dlrun status` claims the job in the store
(one claimer wins) and starts a new supervisor with --resume: it re-attaches to the same Ray job
when the cluster is whole, or cleans up and relaunches from the last checkpoint (attempt.reattach).
"""
from __future__ import annotations

import os
from pathlib import Path

from orchestrator.state.db import Store
from orchestrator.state.records import JobRecord

CLAIMING = -1  # supervisor_pid while a new supervisor is being started


def process_alive(pid: int | None) -> bool:
    """True when pid runs a Python process (not a zombie, not a recycled pid of something else)."""
    if not pid or pid <= 0:
        return pid == CLAIMING
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc (macOS): trust kill(0)
    return b"python" in cmdline or b"dlrun" in cmdline


def orphaned_jobs(store: Store) -> list[JobRecord]:
    return [j for j in store.list_jobs(limit=1000, live_only=True) if not process_alive(j.supervisor_pid)]


def reconcile(store: Store) -> list[str]:
    """Restart a supervisor for every live job whose supervisor is dead. Returns what was done."""
    from orchestrator.runs.executor import spawn_supervisor

    done = []
    for job in orphaned_jobs(store):
        if not store.claim_supervisor(job.id, expected=job.supervisor_pid, claim=CLAIMING):
            continue  # another dlrun process got there first
        pid = spawn_supervisor(job.id, resume=True)
        store.set_supervisor(job.id, pid)
        store.add_event(job.id, "supervisor_restarted", {"dead_pid": job.supervisor_pid, "new_pid": pid})
        done.append(f"{job.id}: its supervisor (pid {job.supervisor_pid}) was gone; "
                    f"re-attached with a new one (pid {pid})")
    return done
