"""Job states and their legal moves. A terminal state is final: nothing overwrites it."""
from __future__ import annotations

from enum import Enum

from orchestrator.errors import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_OK, EXIT_TERMINATED


class JobStatus(str, Enum):
    PENDING = "PENDING"
    PLANNING = "PLANNING"
    PROVISIONING = "PROVISIONING"
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.BUDGET_EXCEEDED})
# plain strings, for SQL `IN (...)` and for comparing rows read from the store
TERMINAL: tuple[str, ...] = tuple(s.value for s in JobStatus if s in _TERMINAL)
LIVE: tuple[str, ...] = tuple(s.value for s in JobStatus if s not in _TERMINAL)

# PENDING is where a job starts and nothing returns to it; a live job may move to any other state
# (re-attaching may find it further along than the store says); a terminal state is final
_ENTRY_ONLY = frozenset({JobStatus.PENDING})


class IllegalTransition(ValueError):
    """A programming error: the code tried a move the state machine does not allow."""


def can_move(current: str | None, new: str) -> bool:
    """Whether a job in `current` may be set to `new` (a fresh job has no current state)."""
    new_s = JobStatus(new)
    if current is None:
        return True
    cur = JobStatus(current)
    if cur.terminal:
        return False
    return new_s == cur or new_s not in _ENTRY_ONLY


class Recovery(Enum):
    """What the run loop does after an attempt ended this way."""

    NONE = "none"            # the job ends: its status is final
    PREEMPT = "preempt"      # count a preemption, block the lost pool, relaunch from the checkpoint
    RELAUNCH = "relaunch"    # relaunch from the checkpoint; nothing was lost to the cloud (counts nothing)
    RESTART = "restart"      # the job's own code failed: run it again while restarts_on_errors allow, else end
    FAILOVER = "failover"    # the cluster never became ready: block what failed and try the next candidate


class Ending(str, Enum):
    """How one attempt ended, and what that leads to (the job status, the recovery, whether the Ray job
    is stopped before teardown, the exit code): decided here and nowhere else."""

    SUCCEEDED = "SUCCEEDED"              # the Ray job succeeded
    FAILED = "FAILED"                    # the Ray job failed (its own code)
    STOPPED = "STOPPED"                  # cancelled (Ctrl-C, SIGTERM, `dlrun cancel`): Ray stopped the job
    PREEMPTED = "PREEMPTED"              # the cloud took the nodes (or the head stayed unreachable)
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"  # the accrued cost reached max_cost while it ran
    INTERRUPTED = "INTERRUPTED"          # dlrun itself stopped (an exception) while the job ran
    RELAUNCH = "RELAUNCH"                # a re-attaching supervisor found nothing to watch on: start again
    NOT_READY = "NOT_READY"              # the launch failed or the head never answered (a ProviderError)

    def __str__(self) -> str:
        return self.value

    def to_status(self) -> JobStatus:
        """The job's status after this ending (RECOVERING / PROVISIONING: the run loop goes on)."""
        return _STATUS[self]

    @property
    def recovery(self) -> Recovery:
        return _RECOVERY.get(self, Recovery.NONE)

    @property
    def stops_job(self) -> bool:
        """Whether the Ray job may still run and is stopped before teardown (its checkpoints stay)."""
        return self in (Ending.PREEMPTED, Ending.BUDGET_EXCEEDED, Ending.INTERRUPTED)

    def exit_code(self, sigterm: bool = False) -> int:
        """dlrun's exit code when the job ends this way (143 for a cancel by SIGTERM)."""
        return exit_code_for(self.to_status(), sigterm)


_STATUS = {Ending.SUCCEEDED: JobStatus.SUCCEEDED, Ending.FAILED: JobStatus.FAILED,
           Ending.STOPPED: JobStatus.CANCELLED, Ending.BUDGET_EXCEEDED: JobStatus.BUDGET_EXCEEDED,
           Ending.INTERRUPTED: JobStatus.CANCELLED, Ending.PREEMPTED: JobStatus.RECOVERING,
           Ending.RELAUNCH: JobStatus.RECOVERING, Ending.NOT_READY: JobStatus.PROVISIONING}
# the exit code of a job that ended in a status (`dlrun submit`'s, and `dlrun status JOB`'s); errors.py: EXIT_*
EXIT_BY_STATUS: dict[JobStatus, int] = {JobStatus.SUCCEEDED: EXIT_OK, JobStatus.FAILED: EXIT_JOB_FAILED,
                                        JobStatus.CANCELLED: EXIT_INTERRUPTED,
                                        JobStatus.BUDGET_EXCEEDED: EXIT_JOB_FAILED}


def exit_code_for(status: JobStatus, sigterm: bool = False) -> int:
    """The exit code of a job that ended in `status` (a cancel by SIGTERM: 143, as a shell reports it)."""
    if sigterm and status == JobStatus.CANCELLED:
        return EXIT_TERMINATED
    return EXIT_BY_STATUS.get(status, EXIT_JOB_FAILED)


_RECOVERY = {Ending.PREEMPTED: Recovery.PREEMPT, Ending.RELAUNCH: Recovery.RELAUNCH,
             Ending.FAILED: Recovery.RESTART, Ending.NOT_READY: Recovery.FAILOVER}


class RayJobStatus(str, Enum):
    """A Ray job's status as its Jobs API reports it (ray.job_submission.JobStatus, without importing ray)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"

    def __str__(self) -> str:
        return self.value

    @property
    def terminal(self) -> bool:
        return self in (RayJobStatus.STOPPED, RayJobStatus.SUCCEEDED, RayJobStatus.FAILED)

    def ending(self) -> Ending:
        """The attempt's ending when the Ray job ended so (only for a terminal status)."""
        if not self.terminal:
            raise ValueError(f"the Ray job is {self.value}: not ended")
        return Ending(self.value)
