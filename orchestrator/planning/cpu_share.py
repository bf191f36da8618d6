"""How much CPU a probed job really got, and how busy the machine was meanwhile (Linux /proc).

A probe on a busy machine runs slower than the job will once the machine is quiet again (issue 35: x9.5
while another Ray head started beside it). Over the window the probe reads its rate from, it samples the
job's process group and the machine:

    share    CPU the job got, in cores: the CPU time of its processes (utime+stime, with the children
             they reaped) over the wall time
    others   CPU everything else got, in cores (/proc/stat's busy time less the job's)
    waited   the time the job's threads were runnable but waiting for a CPU (/proc/PID/task/TID/schedstat,
             the scheduler's run-queue delay): what a busy machine took from it
    wanted   the cores the job would have used alone: the same CPU time in the wall time less what waiting
             took from it, at most the cores there are

The job's time alone on this machine is its measured time x share / wanted. Waiting for a CPU costs a job
wall time only while it has work: over `active` = max(1, (ran + waited) / wall) threads at once, alone it takes
wall - waited / active. A CPU-bound job (ran + waited = wall per thread) is thus sped up by (ran + waited) / ran;
a job that mostly sleeps or waits on I/O, whose few slices waited as long again, hardly at all (it was planned
3x faster: a sleep-paced job probed beside two busy processes, share 0.006 core, waited 0.011). Where /proc
cannot say (not Linux, no schedstat) nothing is corrected.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

BUSY_OTHERS = 0.5  # cores other processes used at or above which the machine counts as busy
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSample:
    wall: float  # time.monotonic()
    job: float  # CPU seconds of the job's process group so far
    machine: float  # busy CPU seconds of the whole machine (all cores) since boot
    tasks: dict = field(default_factory=dict)  # (pid, tid) -> (seconds on a CPU, seconds runnable waiting)


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
            first = f.readline()
    except OSError:
        return None
    cpu = [int(x) for x in first.split()[1:]]
    machine = (sum(cpu[:8]) - cpu[3] - cpu[4]) / _TICK  # user nice system [idle iowait] irq softirq steal
    job, tasks = _group(pgid)
    return CpuSample(time.monotonic(), job, machine, tasks)


def _group(pgid: int) -> tuple[float, dict]:
    ticks, tasks = 0, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # after "(comm)": state ppid pgrp ... utime(11) stime cutime cstime
                continue
            ticks += sum(int(x) for x in fields[11:15])
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ran, waited = f.read().split()[:2]
                tasks[(pid, tid)] = (int(ran) / 1e9, int(waited) / 1e9)
        except (OSError, ValueError, IndexError):
            continue
    return ticks / _TICK, tasks


def use_between(first: CpuSample, last: CpuSample) -> CpuUse | None:
    """What the job got from `first` to `last`."""
    wall = last.wall - first.wall
    if wall <= 0.5:
        return None
    n = cores()
    share = max(0.0, (last.job - first.job) / wall)
    others = max(0.0, (last.machine - first.machine) / wall - share)
    both = first.tasks.keys() & last.tasks.keys()  # threads alive through the window
    ran = sum(last.tasks[k][0] - first.tasks[k][0] for k in both)
    waited = sum(last.tasks[k][1] - first.tasks[k][1] for k in both)
    wanted = share
    if ran > 0 and share > 0:
        active = max(1.0, (ran + waited) / wall)
        alone = wall - waited / active  # > 0: waited / active <= wall * waited / (ran + waited)
        wanted = min(float(n), max(share, share * wall / alone))
    return CpuUse(share=share, others=others, cores=n, wanted=wanted)
