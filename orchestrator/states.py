"""Job states and their legal moves. A terminal state is final: nothing overwrites it."""
from __future__ import annotations

from enum import Enum


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
