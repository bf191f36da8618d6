"""A job with neither `workload:` nor `reference:` is measured: a short local run of its entrypoint.

The job runs here as it would on the local Ray head (its workdir, its env, `jobs` importable, a `run:`
command under jobs/tee.py), told by DLRUN_PROBE=1 that this is a probe, with a throw-away
DLRUN_CHECKPOINT_DIR. Its jobs.metrics lines say how far it got: `progress` (share of the run done, 0-1),
or epoch/epochs, or step/steps, and optionally samples_per_s; for a script that does not call
jobs.metrics, jobs/tee.py writes such lines from what it prints (tqdm bars, Lightning's and the HF
Trainer's bars, `epoch i/N` lines: jobs/progress.py), and the script's own lines win when it has any. The
probe stops when the job ends, after PROBE_SECONDS (PROBE_MAX_SECONDS while it has not reported yet: its
start may be slow), or once it has MIN_POINTS progress lines over MIN_SPAN_SECONDS and PROBE_MIN_SECONDS
have passed; the run time is extrapolated from the progress rate (the time before the first line is the
job's start, counted once). A job that ends by itself (exit 0) within the probe is timed to its end,
progress or not. The result is cached by the job's command, env and workdir content. A job that fails
during the probe, or reports nothing before PROBE_MAX_SECONDS, is an input error: dlrun does not guess.
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
from orchestrator.errors import SpecError
from orchestrator.paths import profiles_dir
from orchestrator.planning.workdir import EXCLUDED_SUFFIXES, EXCLUDES, workdir_digest

PROBE_SECONDS = 20.0
PROBE_MIN_SECONDS = 8.0
# a job still starting (imports, data load) at PROBE_SECONDS is waited for, up to this, for its first line
PROBE_MAX_SECONDS = 60.0
MIN_POINTS = 3
# ... spanning this long: a rate read over a second or two right after a slow start (imports) is noise
MIN_SPAN_SECONDS = 5.0
PROBE_VERSION = 2  # 2: `run:` commands under jobs/tee.py, a finished job timed without progress
TAIL_LINES = 3  # of the job's output, in the error of a failed probe
ASK_FOR_FIELDS = ("add `workload:` (model, input_shape, batch_size, dataset_size, epochs) or `reference:` "
                  "(accelerator, hours) to the job file, or call jobs.metrics.report(epoch=, epochs=) in it")


@dataclass
class ProbeResult:
    run_seconds: float  # the whole run on this machine, job start included
    probe_seconds: float  # how long the probe ran
    complete: bool  # the job finished within the probe
    points: list[tuple[float, float]] = field(default_factory=list)  # (seconds since start, share done)
    samples_per_s: float | None = None
    threads: int = 1

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


def extrapolate(points: list[tuple[float, float]]) -> float:
    """Seconds for the whole run from (elapsed, share done) points: the rate between the first and the
    last point, plus the time before the first point's work began (the job's start)."""
    (t0, p0), (t1, p1) = points[0], points[-1]
    if p1 <= p0 or t1 <= t0:
        return t1 / p1
    rate = (p1 - p0) / (t1 - t0)
    start = max(0.0, t0 - p0 / rate)
    return start + 1.0 / rate


def probe_key(spec) -> str:
    keep = spec.model_dump(mode="json", include={"job", "run", "args", "env", "requirements"})
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

    with tempfile.TemporaryDirectory(prefix="dlrun-probe-") as tmp:
        cwd = os.getcwd() if spec.run else tmp
        if spec.workdir:  # a copy, as Ray runs a job in its unpacked working_dir: what it writes is not the code
            cwd = shutil.copytree(spec.workdir, os.path.join(tmp, "work"), symlinks=False,
                                  ignore=shutil.ignore_patterns(*EXCLUDES, *(f"*{s}" for s in EXCLUDED_SUFFIXES)))
        result = run_probe(spec.name, entrypoint(spec, local=True, workers=1), cwd=cwd, env=_probe_env(spec, tmp, cwd))
    path = cache_path(spec)
    part = path.with_suffix(".tmp")
    part.write_text(json.dumps(result.to_json()))
    part.replace(path)
    return result


def _probe_env(spec, tmp: str, cwd: str) -> dict[str, str]:
    from orchestrator.planning.isolated_profile import child_env

    env = child_env(cwd)
    env.pop("RAY_ADDRESS", None)  # jobs.metrics: print only, no Ray gauges
    env.update(spec.env)
    # as on the local Ray head (runtime_env): `python` is dlrun's own interpreter
    env["PATH"] = f"{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    env.update({PROBE_ENV: "1", "DLRUN_CHECKPOINT_DIR": os.path.join(tmp, "checkpoints"),
                "DLRUN_JOB_ID": "probe", "PYTHONUNBUFFERED": "1"})
    return env


def run_probe(name: str, command: str, *, cwd: str, env: dict[str, str], seconds: float = PROBE_SECONDS,
              min_seconds: float = PROBE_MIN_SECONDS, max_seconds: float = PROBE_MAX_SECONDS) -> ProbeResult:
    """Run `command` (a shell command) for `seconds` (up to `max_seconds` while it has reported no
    progress yet), reading its progress lines."""
    start = time.monotonic()
    proc = subprocess.Popen(command, shell=True, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    assert proc.stdout is not None  # stdout=PIPE
    out = _ProbeOutput()
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
    run = elapsed if complete else extrapolate(out.points)
    return ProbeResult(run_seconds=run, probe_seconds=elapsed, complete=complete, points=out.points,
                       samples_per_s=out.samples, threads=os.cpu_count() or 1)


@dataclass
class _ProbeOutput:
    """What the probe has read of the job's output: its progress points (seconds since start, share done),
    its last samples/s, its last lines that were not progress, the half line not ended yet."""
    points: list[tuple[float, float]] = field(default_factory=list)
    samples: float | None = None
    tail: list[str] = field(default_factory=list)
    partial: bytes = b""
    eof: bool = False  # the job closed its output: it ended

    def enough(self, elapsed: float, min_seconds: float) -> bool:
        """MIN_POINTS progress points over a long enough span, and min_seconds passed."""
        if len(self.points) < MIN_POINTS or elapsed < min_seconds:
            return False
        return self.points[-1][0] - self.points[0][0] >= min(MIN_SPAN_SECONDS, min_seconds)

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
            self.points.append((now, done))

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
        if not sel.select(timeout=min(0.5, limit - elapsed)):
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
