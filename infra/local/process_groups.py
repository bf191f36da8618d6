"""A local Ray head's processes: its process group, and the processes of it that left the group.

Ray starts every process of a head with the head's temp dir (or its session dir under it) on its command
line; a process that calls setsid leaves the group but not that mark (read from /proc).
"""
from __future__ import annotations

import os
import signal
import time


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_size(pgid: int) -> int | None:
    """How many live (not zombie) processes the group has (None where /proc cannot say)."""
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    count = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        except OSError:
            continue
        count += fields[0] != "Z" and int(fields[2]) == pgid  # a zombie is dead: its parent only has to reap it
    return count


def wait_group(pgid: int, wait: float) -> None:
    """Until the group is gone, or `wait` has passed. Ray's processes leave SIGTERM in a second or two,
    then stay zombies until reaped: the `ray start` leader by this process when it started the head
    (reaped here: else the wait ran into the SIGKILL and its 5 s), the rest by init."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and group_alive(pgid):
        if _group_size(pgid) == 0:
            try:
                os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.1)


def kill_strays(temp_dir: str) -> None:
    """SIGKILL the processes of this head that left its process group (a Ray process that calls setsid):
    every process of a head is started with its temp dir (or its session dir under it) on its command line."""
    me = os.getpid()
    for pid in _pids_mentioning(temp_dir):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _pids_mentioning(path: str) -> list[int]:
    """The processes with `path` or a path under it as (part of) an argument."""
    needles = (path.encode() + b"/", path.encode() + b"\0")
    found = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if any(n in cmdline for n in needles):
            found.append(pid)
    return found
