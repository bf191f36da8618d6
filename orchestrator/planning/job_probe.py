"""A job with neither `workload:` nor `reference:` is measured: a short local run of its entrypoint.

The job runs here as it would on the local Ray head (its workdir, its env, OMP_NUM_THREADS=1 unless set, `jobs`
importable, a `run:` command under jobs/tee.py; a job with `image:` in that image, with podman or docker, once its
registry has answered), told by DLRUN_PROBE=1 that this is a probe, with a throw-away DLRUN_CHECKPOINT_DIR. Its
jobs.metrics lines say how far it got: `progress` (share of the run done, 0-1), or epoch/epochs, or step/steps, and
optionally samples_per_s; for a script that does not call jobs.metrics, jobs/tee.py writes such lines from what it
prints (tqdm bars, Lightning's and the HF Trainer's bars, `epoch i/N` lines: jobs/progress.py), and the script's own
lines win when it has any. The probe stops when the job ends, once its rate is stable (the last STABLE_WINDOWS
intervals of at least STABLE_WINDOW_S each agree within STABLE_TOLERANCE of their mean) and PROBE_MIN_SECONDS have
passed, or at PROBE_SECONDS (PROBE_MAX_SECONDS while it has not reported yet: its start may be slow). The run time is
the time so far plus what is left at the rate of those last intervals (the job's start and a slow first epoch are
counted once); the slowest and fastest of them give the range, never narrower than RUN_LOW-RUN_HIGH of the estimate
(how much one job's runs vary on one machine). The CPU the job got meanwhile is measured (cpu_share.py): where its
threads waited for a CPU (a machine busy with other work), the range reaches down to what the job would take alone; a
rate that held steady (steady load: likely still there for the run) is planned as measured, one still changing at the
cap (load that came and went) as the job alone would run. A job that ends by itself (exit 0) within the probe is timed
to its end, progress or not. Cached by the job's command, env, image and workdir content. A job that fails during the
probe, or reports nothing before PROBE_MAX_SECONDS, is an input error.
"""
from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

from jobs.metrics import PROBE_ENV
from orchestrator.errors import SpecError, UsageError
from orchestrator.planning import cpu_share
from orchestrator.paths import profiles_dir
from orchestrator.planning.workdir import EXCLUDED_SUFFIXES, EXCLUDES, workdir_digest

PROBE_SECONDS, PROBE_MIN_SECONDS = 40.0, 8.0  # the cap once the job reports progress; the least probe
PROBE_MAX_SECONDS = 60.0  # a job still starting (imports, data load) at PROBE_SECONDS is waited for, up to this
# the rate is read over intervals of STABLE_WINDOW_S at least, the last STABLE_WINDOWS of them agreeing within ...
STABLE_WINDOW_S, STABLE_WINDOWS, STABLE_TOLERANCE = 2.0, 3, 0.15  # ... this share of their mean
SAMPLE_S = 0.5  # how often the CPU the job got is sampled
# one job on one 2-core VM, minutes apart: runs 25.1-31.7 s, probes 24.8-33.1 s; estimate/run 0.76-1.38 in 15
RUN_LOW, RUN_HIGH = 0.7, 1.35  # comparisons, quiet and beside a hog (bench/probe_under_load.py, 2026-11-28)
PROBE_VERSION = 7  # 2: `run:` under tee.py, a finished job timed without progress; 3: stable rate, range and CPU share;
#                    4: one OpenMP thread, as Ray; 5: `threads` as run; 6: RUN_LOW/HIGH; 7: `wanted` of a sleeping job
TAIL_LINES = 3  # of the job's output, in the error of a failed probe
# Ray's job entrypoint inherits it from the supervisor actor, which holds no CPU: a worker's OMP_NUM_THREADS, if
# unset, is set to its CPUs or 1 (ray/_private/utils.py set_omp_num_threads_if_unset); torch runs one thread
RAY_ENTRYPOINT_OMP_THREADS = "1"
ADD_FIELDS = ("add `workload:` (model, input_shape, batch_size, dataset_size, epochs) or `reference:` (accelerator, "
              "hours) to the job file")
ASK_FOR_FIELDS = f"{ADD_FIELDS}, or call jobs.metrics.report(epoch=, epochs=) in it"


@dataclass
class ProbeResult:
    run_seconds: float  # the whole run on this machine, job start included (alone on it: corrected for load)
    probe_seconds: float  # how long the probe ran
    complete: bool  # the job finished within the probe
    points: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, share done)
    samples_per_s: float | None = None
    threads: int = 1  # the threads the job ran with (its OMP_NUM_THREADS: probe_job); the CPU speed-up's base
    run_low: float = 0.0  # the range: the last intervals' fastest rate, corrected, at most RUN_LOW x the estimate
    run_high: float = 0.0  # ... their slowest, uncorrected (the machine as busy), at least RUN_HIGH x the estimate
    spread: float | None = None  # how far the last intervals' rates were from their mean (0.08: +/-8 %)
    stable: bool = False  # the probe stopped because the rate was stable (not at its cap)
    measured_seconds: float = 0.0  # the run as measured, before the correction for a busy machine
    cpu: dict | None = None  # cpu_share.CpuUse over the rate's intervals: share, others, cores, wanted
    busy: bool = False  # other processes used at least cpu_share.BUSY_OTHERS cores meanwhile

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> ProbeResult:
        d = dict(d)
        d["points"] = [tuple(p) for p in d.get("points", [])]
        return cls(**d)


def share_done(payload: dict) -> float | None:
    """The share of the run a jobs.metrics line says is done, or None."""
    if "event" in payload:
        return None
    try:
        if "progress" in payload:
            value = float(payload["progress"])
        elif payload.get("epochs"):
            value = float(payload["epoch"]) / float(payload["epochs"])
        elif payload.get("steps"):
            value = float(payload["step"]) / float(payload["steps"])
        else:
            return None
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    return value if 0.0 < value <= 1.0 else None


def extrapolate(points: list[tuple[float, float]], rate: float | None = None) -> float:
    """Seconds for the whole run from (elapsed, share done) points: the time so far plus what is left at
    `rate` (share per second; default: the rate between the first and the last point)."""
    (t0, p0), (t1, p1) = points[0], points[-1]
    if rate is None:
        if p1 <= p0 or t1 <= t0:
            return t1 / p1
        rate = (p1 - p0) / (t1 - t0)
    return t1 + (1.0 - p1) / rate


def window_rates(points: list[tuple[float, float]], window_s: float = STABLE_WINDOW_S,
                 count: int = STABLE_WINDOWS) -> list[tuple[float, float, float]]:
    """The last `count` intervals (start, end, rate), each at least window_s long, back from the last point;
    fewer where the points do not span them. The first point (the job's start is before it) begins none."""
    out: list[tuple[float, float, float]] = []
    end = len(points) - 1
    i = end - 1
    while i >= 1 and len(out) < count:
        (ts, ps), (te, pe) = points[i], points[end]
        if te - ts >= window_s:
            if pe > ps:
                out.append((ts, te, (pe - ps) / (te - ts)))
            end = i
        i -= 1
    return out[::-1]


def spread_of(rates: list[float]) -> float:
    mean = sum(rates) / len(rates)
    return max(abs(r - mean) for r in rates) / mean


def probe_note(probe: ProbeResult) -> str:
    """The plan's note: `ran to its end`, or the probe's length, its rate's steadiness, the range, a busy machine."""
    if probe.complete:
        return "ran to its end"
    parts = [f"extrapolated from a {probe.probe_seconds:.0f} s probe"]
    if probe.spread is not None:
        steady = "steady" if probe.stable else "not steady yet at the probe's cap"
        parts.append(f"its rate {steady} within +/-{probe.spread * 100:.0f} %")
    if probe.run_high > probe.run_low > 0:
        parts.append(f"range {probe.run_low:.0f}-{probe.run_high:.0f} s")
    cpu = probe.cpu or {}
    if probe.busy:
        busy = f"the machine was busy (other processes used {cpu.get('others', 0):.1f} of {cpu.get('cores', 0)} cores"
        if cpu.get("wanted", 0) > cpu.get("share", 0) * 1.05:
            busy += f"; the job got {cpu.get('share', 0):.1f} of the {cpu.get('wanted', 0):.1f} it uses alone)"
            busy += (f": planned as it ran, about {probe.measured_seconds * cpu['share'] / cpu['wanted']:.0f} s alone"
                     if probe.stable else f": corrected from {probe.measured_seconds:.0f} s")  # alone: cpu_share.py
        else:
            busy += "), the job got the CPU it uses alone"
        parts.append(busy)
    return "; ".join(parts)


def probe_key(spec) -> str:
    keep = spec.model_dump(mode="json", include={"job", "run", "args", "env", "requirements", "image"})
    blob = json.dumps({"v": PROBE_VERSION, "spec": keep, "workdir": workdir_digest(spec.workdir)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_path(spec):
    return profiles_dir() / f"probe-{probe_key(spec)}.json"


def cached_probe(spec) -> ProbeResult | None:
    try:
        return ProbeResult.from_json(json.loads(cache_path(spec).read_text()))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def probe_job(spec, *, refresh: bool = False) -> ProbeResult:
    cached = None if refresh else cached_probe(spec)
    if cached is not None:
        return cached
    from orchestrator.runs.entrypoint import entrypoint

    if spec.image:  # the registry's answer (a mistyped tag, a login) before anything needs a runtime here
        from orchestrator.planning.image_check import probe_image

        probe_image(spec)
    with tempfile.TemporaryDirectory(prefix="dlrun-probe-") as tmp:
        cwd = os.getcwd() if spec.run else tmp
        if spec.workdir:  # a copy, as Ray runs a job in its unpacked working_dir: what it writes is not the code
            cwd = shutil.copytree(spec.workdir, os.path.join(tmp, "work"), symlinks=False, ignore=_not_copied)
        env = _probe_env(spec, tmp, cwd)
        result = run_probe(spec.name, _probe_command(spec, entrypoint), cwd=cwd, env=env)
    result.threads = int(env["OMP_NUM_THREADS"]) if env["OMP_NUM_THREADS"].isdigit() else os.cpu_count() or 1
    path = cache_path(spec)
    part = path.with_suffix(".tmp")
    part.write_text(json.dumps(result.to_json()))
    part.replace(path)
    return result


def _not_copied(src: str, names: list[str]) -> set[str]:
    """Left out of the probe's copy: Ray's excludes, and what is neither file nor folder (a server's socket)."""
    skip = set(shutil.ignore_patterns(*EXCLUDES, *(f"*{s}" for s in EXCLUDED_SUFFIXES))(src, names))
    return skip | {n for n in names if not os.path.isfile(p := os.path.join(src, n)) and not os.path.isdir(p)}


def _probe_command(spec, entrypoint) -> str:
    """The job as the local Ray head runs it; with `image:`, in that image (its environment, and its speed): podman
    or docker here (entrypoint checks), else the three ways to time the job; the registry answered (probe_job)."""
    try:
        return entrypoint(spec, local=True, workers=1, image="runtime" if spec.image else "")
    except UsageError:  # no container runtime here (runs/entrypoint.py container_command)
        from infra.images.runtime import INSTALL_HINT, find_runtime

        raise SpecError(f"{spec.name}: without workload or reference dlrun times the job by running it briefly here in "
                        f"its image {spec.image} (its registry has it), and no container runtime works here "
                        f"({find_runtime().problem}): {INSTALL_HINT}; or {ADD_FIELDS}") from None


def _probe_env(spec, tmp: str, cwd: str) -> dict[str, str]:
    from orchestrator.planning.isolated_profile import child_env

    env = child_env(cwd)
    env.pop("RAY_ADDRESS", None)  # jobs.metrics: print only, no Ray gauges
    env.update(spec.env)
    # as Ray gives it: with torch's default (a thread per core) a probe beside a busy process thrashed, 10-70x slower
    env.setdefault("OMP_NUM_THREADS", RAY_ENTRYPOINT_OMP_THREADS)
    # as on the local Ray head (runtime_env): `python` is dlrun's own interpreter
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    env.update({PROBE_ENV: "1", "DLRUN_CHECKPOINT_DIR": os.path.join(tmp, "checkpoints"),
                "DLRUN_JOB_ID": "probe", "PYTHONUNBUFFERED": "1"})
    return env


def run_probe(name: str, command: str, *, cwd: str, env: dict[str, str], seconds: float = PROBE_SECONDS,
              min_seconds: float = PROBE_MIN_SECONDS, max_seconds: float = PROBE_MAX_SECONDS) -> ProbeResult:
    """Run `command` (a shell command) until its rate is stable (after min_seconds), at most `seconds` (up to
    `max_seconds` while it has reported no progress yet), reading its progress lines."""
    start = time.monotonic()
    proc = subprocess.Popen(command, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None  # stdout=PIPE
    out = _ProbeOutput(pgid=proc.pid, start=start)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        _read_until_enough(sel, proc.stdout.fileno(), out, start, seconds, min_seconds, max_seconds)
    finally:
        sel.close()
        elapsed = time.monotonic() - start
        ended = _wait(proc, 10.0 if out.eof else 0.1)
        if not ended:
            _stop(proc)
        proc.stdout.close()
    out.flush()
    if ended and proc.returncode != 0:
        last = " | ".join([t.strip()[:160] for t in out.tail if t.strip()][-TAIL_LINES:]) or "no output"
        raise SpecError(f"{name}: the probe run of the job's entrypoint failed (exit {proc.returncode}; "
                        f"its last lines: {last}); fix the script, or {ASK_FOR_FIELDS}")
    complete = ended and proc.returncode == 0
    if not out.points and not complete:
        raise SpecError(f"{name}: no workload or reference, and the job reported no progress in "
                        f"{elapsed:.0f} s of a probe run; {ASK_FOR_FIELDS}")
    if complete:
        return ProbeResult(run_seconds=elapsed, probe_seconds=elapsed, complete=True, points=out.points,
                           samples_per_s=out.samples, run_low=elapsed * RUN_LOW,
                           run_high=elapsed * RUN_HIGH, measured_seconds=elapsed)
    return _estimate(out, elapsed)


def _estimate(out: _ProbeOutput, elapsed: float) -> ProbeResult:
    """The run from the last intervals' rate, corrected for the CPU the job did not get on a busy machine."""
    windows = window_rates(out.points)
    rates = [r for _, _, r in windows]
    if len(rates) >= 2:
        mean = sum(rates) / len(rates)
        run, fast, slow = (extrapolate(out.points, r) for r in (mean, max(rates), min(rates)))
        spread = spread_of(rates)
        since = windows[0][0]
    else:  # too short for intervals: first to last point
        run = fast = slow = extrapolate(out.points)
        spread, since = None, out.points[0][0]
    use = out.cpu_use(since)
    slowdown = use.slowdown if use is not None else 1.0
    # a rate that held steady says the load held steady too: it is likely still there for the run, which is
    # then planned as measured (the range reaches down to the time alone); a rate still changing at the cap
    # (load that came and went: another head starting) is planned as the job alone would run
    planned = run if out.stable else run / slowdown
    return ProbeResult(run_seconds=planned, probe_seconds=elapsed, complete=False, points=out.points,
                       samples_per_s=out.samples, run_low=min(fast / slowdown, planned * RUN_LOW),
                       run_high=max(slow, planned * RUN_HIGH), spread=spread, stable=out.stable, measured_seconds=run,
                       cpu=use.to_json() if use is not None else None, busy=bool(use and use.busy))


@dataclass
class _ProbeOutput:
    """What the probe has read of the job's output: its progress points (seconds since start, share done),
    its last samples/s, its last lines that were not progress, the half line not ended yet; and the CPU the
    job's process group got (samples every SAMPLE_S)."""
    pgid: int = 0
    start: float = 0.0  # time.monotonic() at the job's start
    points: list[tuple[float, float]] = field(default_factory=list)
    samples: float | None = None
    tail: list[str] = field(default_factory=list)
    partial: bytes = b""
    eof: bool = False  # the job closed its output: it ended
    stable: bool = False
    cpu: list[cpu_share.CpuSample] = field(default_factory=list)

    def enough(self, elapsed: float, min_seconds: float) -> bool:
        """min_seconds passed and the last intervals' rates agree within STABLE_TOLERANCE."""
        if elapsed < min_seconds:
            return False
        rates = [r for _, _, r in window_rates(self.points)]
        self.stable = len(rates) == STABLE_WINDOWS and spread_of(rates) <= STABLE_TOLERANCE
        return self.stable

    def sample_cpu(self, now: float) -> None:
        if self.pgid and (not self.cpu or now - self.cpu[-1].wall >= SAMPLE_S):
            taken = cpu_share.sample(self.pgid)
            if taken is not None:
                self.cpu.append(taken)

    def cpu_use(self, since: float) -> cpu_share.CpuUse | None:
        """What the job got from `since` (seconds after its start) to the last sample."""
        window = [c for c in self.cpu if c.wall - self.start >= since]
        if len(window) < 2:
            return None
        return cpu_share.use_between(window[0], window[-1])

    def feed(self, chunk: bytes, now: float) -> None:
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for raw in lines:
            self._line(raw.decode(errors="replace"), now)

    def _line(self, line: str, now: float) -> None:
        from jobs.metrics import parse_line
        from jobs.progress import terminal_line

        parsed = parse_line(line)
        if parsed is None:
            self.tail = (self.tail + [terminal_line(line)])[-50:]
            return
        kind, payload = parsed
        done = 1.0 if kind == "result" else share_done(payload)
        if isinstance(payload.get("samples_per_s"), (int, float)):
            self.samples = float(payload["samples_per_s"])
        if done is not None and (not self.points or done > self.points[-1][1]):
            late = bool(self.points) and self.points[-1][0] == now  # lines read together: the last's time only
            self.points[len(self.points) - late:] = [(now, done)]

    def flush(self) -> None:
        """The last line, when the job's output did not end with a newline."""
        from jobs.progress import terminal_line

        if self.partial:
            self.tail.append(terminal_line(self.partial.decode(errors="replace")))


def _read_until_enough(sel: selectors.BaseSelector, fd: int, out: _ProbeOutput, start: float, seconds: float,
                       min_seconds: float, max_seconds: float) -> None:
    """Read the job's output into `out` until it ends, its time is up, or it has shown enough progress."""
    while True:
        elapsed = time.monotonic() - start
        limit = seconds if out.points else max_seconds
        if elapsed >= limit or out.enough(elapsed, min_seconds):
            return
        out.sample_cpu(time.monotonic())
        if not sel.select(timeout=min(SAMPLE_S, limit - elapsed)):
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            out.eof = True
            return
        out.feed(chunk, time.monotonic() - start)


def _wait(proc, timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _stop(proc) -> None:
    """End the probe's whole process group (the shell and the job it started), and wait until it is gone."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()  # reap the shell; the group lives on while the job does
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
    _wait(proc, 1.0)
