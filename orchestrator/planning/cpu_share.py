"""How much CPU a probed job really got, and how busy the machine was meanwhile (Linux /proc).

A probe on a busy machine runs slower than the job will once the machine is quiet again (issue 35: x9.5
while another Ray head started beside it). The probe samples, over the window its rate is read from:
the CPU time of the job's process group (every live process of it, with the children it reaped), the
machine's busy CPU time (/proc/stat) and its runnable threads (procs_running). From these:

    share   CPU the job got, in cores (its CPU time / wall time)
    others  CPU everything else got, in cores
    idle    cores - share - others; near 0: the machine was saturated and the job may have got less than
            it would alone
    wanted  on a saturated machine, the cores the job would have used alone: the scheduler splits the cores
            by runnable threads, so the job's threads are runnable * share / (share + others), at most cores

The job's time on a quiet machine is its measured time x share / wanted (never more than measured).
Where /proc cannot be read (not Linux) nothing is corrected.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

SATURATED_IDLE = 0.25  # cores left idle below which the machine counts as saturated
BUSY_OTHERS = 0.5  # cores other processes used above which the machine counts as busy
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSample:
    wall: float  # time.monotonic()
    job: float  # CPU seconds of the job's process group so far
    machine: float  # busy CPU seconds of the whole machine (all cores) since boot
    runnable: int  # threads running or runnable now, the sampling one included


@dataclass(frozen=True)
class CpuUse:
    """What the job got between two samples, in cores."""

    share: float
    others: float
    cores: int
    wanted: float

    @property
    def busy(self) -> bool:
        return self.others >= BUSY_OTHERS

    @property
    def slowdown(self) -> float:
        """The job's measured time over its time alone (>= 1)."""
        return max(1.0, self.wanted / self.share) if self.share > 0 else 1.0

    def to_json(self) -> dict:
        return {"share": round(self.share, 3), "others": round(self.others, 3), "cores": self.cores,
                "wanted": round(self.wanted, 3)}


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sample(pgid: int) -> CpuSample | None:
    """None where /proc cannot say."""
    try:
        with open("/proc/stat") as f:
            stat = f.read()
    except OSError:
        return None
    cpu = [int(x) for x in stat.split("\n", 1)[0].split()[1:]]
    machine = (sum(cpu[:8]) - cpu[3] - cpu[4]) / _TICK  # user nice system [idle iowait] irq softirq steal
    runnable = next((int(line.split()[1]) for line in stat.splitlines() if line.startswith("procs_running")), 1)
    return CpuSample(time.monotonic(), _group_cpu(pgid), machine, runnable)


def _group_cpu(pgid: int) -> float:
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # after "(comm)": state ppid pgrp ... utime(11) stime cutime cstime
            ticks += sum(int(x) for x in fields[11:15])
    return ticks / _TICK


def use_between(first: CpuSample, last: CpuSample, runnable: list[int]) -> CpuUse | None:
    """What the job got from `first` to `last`; runnable: procs_running samples in between."""
    wall = last.wall - first.wall
    if wall <= 0.5:
        return None
    n = cores()
    share = max(0.0, (last.job - first.job) / wall)
    others = max(0.0, (last.machine - first.machine) / wall - share)
    wanted = share
    if n - share - others < SATURATED_IDLE and runnable and share > 0:
        threads = max(0.0, sum(runnable) / len(runnable) - 1)  # less the sampler itself
        wanted = min(float(n), max(share, threads * share / (share + others)))
    return CpuUse(share=share, others=others, cores=n, wanted=wanted)
