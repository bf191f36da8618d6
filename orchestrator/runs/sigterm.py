"""SIGTERM (a process manager, a CI cancel, `kill`) cancels the job the way Ctrl-C's "cancel" does.

The handler raises `Terminated`, a KeyboardInterrupt, in the main thread: every path that stops the
Ray job, tears the cluster down and records the time and cost on Ctrl-C does the same for it, without
asking (nobody is at a terminal to answer). A second SIGTERM while that teardown runs is ignored.
"""
from __future__ import annotations

import signal

_received = False


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: cancel without asking; the process exits 143 (errors.EXIT_TERMINATED)."""


def received() -> bool:
    return _received


def cancel_reason() -> str:
    """How the job was cancelled, for its status detail and the result line."""
    return "cancelled by SIGTERM" if _received else "cancelled with Ctrl-C"


def _handler(signum, frame) -> None:
    global _received
    if _received:
        return  # the first one is being handled: the teardown goes on
    _received = True
    raise Terminated("SIGTERM")


def cancel_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _handler)
