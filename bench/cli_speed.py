"""How fast dlrun is at the terminal, each figure against a baseline measured in the same run.

    python bench/cli_speed.py [--repeat 5] [--lines 100000]

(1) `dlrun --help` (a fresh interpreter, as the console script runs it) against `python -c pass`;
    goal: <= 0.25 s.
(2) Submit-to-finished of a trivial script (`python hello.py` in its own working_dir) on one local Ray
    head: `dlrun submit JOB --backend local` (a process, as a user runs it: start, plan, submit, watch,
    bookkeeping, exit) against Ray's Jobs SDK in this process (client made beforehand: submit, poll
    every 0.1 s) and against `ray job submit` (a process, which follows the log to its end). Same
    entrypoint and runtime_env; the three alternate, medians are compared; goal: dlrun <= 1.3x the SDK.
    dlrun's time is broken down from its store: start+plan, submit, Ray (to Ray's end time), end.
(3) A job printing N lines followed to its end, at N/4, N/2 and N lines, by dlrun's watcher (display to
    /dev/null, the same status polls): with Ray's websocket tail (each character once) against
    re-reading the whole log at every poll (what dlrun did before). Characters read per character of
    log, and CPU time per 1,000 lines: flat means linear in the log's length.

dlrun's modules are byte-compiled first (as pip does at install). A Ray head is started here (its own
process group, a temporary $DLRUN_HOME) and stopped in `finally`. One untimed job runs first (the head
builds its worker pool), and one untimed dlrun submit (it builds and uploads its packages once).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
DLRUN = [sys.executable, "-c", "import sys; from orchestrator.cli.main import main; sys.exit(main())"]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
med = statistics.median


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, **kw)
    return time.perf_counter() - t0, proc


# --- (1) --help ---------------------------------------------------------------------------------------

def bench_help(repeat: int) -> None:
    bare, helps = [], []
    for _ in range(max(repeat, 5) * 2):
        bare.append(timed([sys.executable, "-c", "pass"])[0])
        t, proc = timed([*DLRUN, "--help"])
        assert proc.returncode == 0 and "Commands:" in proc.stdout, proc.stderr
        helps.append(t)
    h, b = med(helps), med(bare)
    print(f"(1) dlrun --help {h:.3f} s, python -c pass {b:.3f} s: {h / b:.1f}x, {h - b:.3f} s of dlrun "
          f"({'within' if h <= 0.25 else 'OUTSIDE'} the <= 0.25 s goal)", flush=True)


# --- (2) submit to finished ---------------------------------------------------------------------------------

def trivial_job(home: Path) -> tuple[Path, Path]:
    wd = home / "trivial"
    wd.mkdir()
    (wd / "hello.py").write_text("print('hello')\n")
    job = home / "trivial.yaml"
    job.write_text(f"name: trivial\nrun: python hello.py\nworkdir: {wd}\nresources:\n  clouds: [local]\n")
    return job, wd


def run_sdk(client, entrypoint: str, renv: dict, tag: str) -> float:
    t0 = time.perf_counter()
    sid = client.submit_job(entrypoint=entrypoint, runtime_env=renv, submission_id=f"bench-sdk-{tag}-{os.getpid()}")
    while str(client.get_job_status(sid).value) not in TERMINAL:
        time.sleep(0.1)
    total = time.perf_counter() - t0
    assert str(client.get_job_status(sid).value) == "SUCCEEDED", client.get_job_logs(sid)
    return total


def run_ray_cli(address: str, wd: Path, renv: dict, entrypoint: str, tag: str) -> float:
    ray_bin = str(Path(sys.executable).parent / "ray")
    t, proc = timed([ray_bin, "job", "submit", "--address", address, "--submission-id",
                     f"bench-cli-{tag}-{os.getpid()}", "--runtime-env-json", json.dumps(renv), "--",
                     *entrypoint.split()])
    assert proc.returncode == 0 and "hello" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    return t


def run_dlrun(client, job: Path, env: dict) -> dict:
    from orchestrator.state.db import default_store
    from orchestrator.states import JobStatus

    wall0 = time.time()
    t, proc = timed([*DLRUN, "submit", str(job), "--backend", "local"], env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    job_id = proc.stdout.split()[0]
    job = default_store().get_job(job_id)
    submitted = next(e.ts for e in default_store().events(job_id) if e.status == JobStatus.SUBMITTED)
    ray_end = client.get_job_info(job.ray_submission_id).end_time / 1000.0
    return {"total": t, "start_plan": job.created_at - wall0, "submit": submitted - job.created_at,
            "ray": ray_end - submitted, "end": wall0 + t - ray_end}


def bench_submit(client, address: str, home: Path, repeat: int) -> None:
    from orchestrator.planning.spec import load_job
    from orchestrator.runs.entrypoint import entrypoint, runtime_env

    job, wd = trivial_job(home)
    spec = load_job(job)
    cmd = entrypoint(spec, local=True, workers=1)
    renv = runtime_env(spec, job_id="bench", checkpoint=str(home / "ckpt"), price_per_hour=0.0, local=True)
    env = dict(os.environ, DLRUN_RAY_ADDRESS=address, DLRUN_HOME=str(home))
    run_dlrun(client, job, env)  # untimed: dlrun's first submit builds and uploads the packages
    sdk, cli, dl = [], [], []
    print(f"\n{'run':<4} {'SDK s':>6} {'ray job submit s':>16} {'dlrun s':>8}   dlrun: {'start+plan':>10} "
          f"{'submit':>6} {'Ray':>5} {'end':>5}")
    for i in range(repeat):
        sdk.append(run_sdk(client, cmd, renv, str(i)))
        cli.append(run_ray_cli(address, wd, renv, cmd, str(i)))
        dl.append(run_dlrun(client, job, env))
        d = dl[-1]
        print(f"{i + 1:<4} {sdk[-1]:>6.2f} {cli[-1]:>16.2f} {d['total']:>8.2f}   {'':>6} {d['start_plan']:>10.2f} "
              f"{d['submit']:>6.2f} {d['ray']:>5.2f} {d['end']:>5.2f}", flush=True)
    s, c, d = med(sdk), med(cli), med(x["total"] for x in dl)
    print(f"(2) submit-to-finished, median of {repeat}: SDK in-process {s:.2f} s, `ray job submit` {c:.2f} s, "
          f"dlrun submit {d:.2f} s")
    print(f"    dlrun / SDK = {d / s:.2f} ({'within' if d / s <= 1.3 else 'OUTSIDE'} the <= 1.3 goal); "
          f"dlrun / `ray job submit` = {d / c:.2f}")
    print(f"    dlrun: start+plan {med(x['start_plan'] for x in dl):.2f} s, submit {med(x['submit'] for x in dl):.2f} s, "
          f"Ray {med(x['ray'] for x in dl):.2f} s, end (last poll, teardown, exit) {med(x['end'] for x in dl):.2f} s",
          flush=True)


# --- (3) a long log followed --------------------------------------------------------------------------------

LINES_PY = """import sys, time
n, rate = int(sys.argv[1]), float(sys.argv[2])
t0 = time.time()
for i in range(n):
    print(f"step {i:>7} loss={1.0 / (i + 1):.6f} some more text to make a realistic log line", flush=False)
    if i % 1000 == 999:
        sys.stdout.flush()
        time.sleep(max(0.0, t0 + (i + 1) / rate - time.time()))
sys.stdout.flush()
"""


class RereadTail:
    """The log transport dlrun had before: the whole log at every poll, the new part cut from its end."""

    def __init__(self, jobs, sid: str):
        self.jobs, self.sid, self.seen, self.read_chars, self.whole_reads = jobs, sid, 0, 0, 0

    def read(self) -> str:
        text = self.jobs.logs(self.sid)
        self.read_chars += len(text)
        self.whole_reads += 1
        new, self.seen = text[self.seen:], len(text)
        return new

    finish = read

    def close(self) -> None:
        pass


def follow(jobs, sid: str, reread: bool) -> dict:
    """dlrun's watcher on the job to its end (display to /dev/null, the same status polls either way);
    reread: with the old log transport."""
    from orchestrator.cli.render.display import JobView, PlainDisplay
    from orchestrator.cost import CostMeter
    from orchestrator.runs.watch import Watcher
    from orchestrator.states import Ending

    with open(os.devnull, "w") as null:
        w = Watcher(jobs=jobs, submission_id=sid, view=JobView(), display=PlainDisplay(null),
                    meter=CostMeter(0.0, 0.0, time.time()))
        if reread:
            w._tail = RereadTail(jobs, sid)
        out = w.run()
    assert out.kind is Ending.SUCCEEDED, out
    return {"read": w._tail.read_chars if reread else w._tail._received, "whole_reads": w._tail.whole_reads}


def bench_follow(address: str, home: Path, lines: int) -> None:
    from orchestrator.runs.ray_jobs import RayJobs

    wd = home / "lines"
    wd.mkdir()
    (wd / "lines.py").write_text(LINES_PY)
    jobs = RayJobs(address)
    rate = lines / 8.0  # the longest log takes 8 s to write, the others less: the same rate for all
    print(f"\n{'lines':>8} {'log MB':>7}   {'tail: read/log':>14} {'CPU ms/1k lines':>15}   "
          f"{'re-read: read/log':>17} {'CPU ms/1k lines':>15}")
    per_line = {}
    for n in (lines // 4, lines // 2, lines):
        row = []
        for how in ("tail", "reread"):
            sid = jobs.submit(entrypoint=f"python lines.py {n} {rate}", submission_id=f"bench-{how}-{n}-{os.getpid()}",
                              runtime_env={"working_dir": str(wd)}, metadata={}, log=lambda line: None)
            cpu0 = time.process_time()
            got = follow(jobs, sid, reread=how == "reread")
            cpu = time.process_time() - cpu0
            size = len(jobs.logs(sid))
            row.append((got["read"] / size, cpu * 1000 / (n / 1000)))
            per_line[(how, n)] = row[-1][1]
        print(f"{n:>8} {size / 1e6:>7.2f}   {row[0][0]:>14.2f} {row[0][1]:>15.2f}   {row[1][0]:>17.2f} "
              f"{row[1][1]:>15.2f}", flush=True)
    small, big = lines // 4, lines
    print(f"(3) CPU per line from {small:,} to {big:,} lines: tail x{per_line[('tail', big)] / per_line[('tail', small)]:.2f}"
          f" (1.0 = linear), re-reading x{per_line[('reread', big)] / per_line[('reread', small)]:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: help,submit,follow")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    # byte-compiled first, as `pip install` does: an interpreter run with PYTHONDONTWRITEBYTECODE (as in
    # a development shell) would otherwise compile dlrun's sources on every start
    import compileall

    for pkg in ("orchestrator", "infra", "jobs", "configs"):
        compileall.compile_dir(str(ROOT / pkg), quiet=1)
    if "help" not in skip:
        bench_help(args.repeat)
    if skip >= {"submit", "follow"}:
        return
    home = Path(tempfile.mkdtemp(prefix="dlrun-bench-"))
    os.environ["DLRUN_HOME"] = str(home)
    from ray.job_submission import JobSubmissionClient

    from bench_head import bench_head
    from orchestrator.runs.packages import ray_logs_to
    from orchestrator.runs.ray_jobs import _default_headers

    with bench_head(home) as head:
        headers = _default_headers(head.dashboard_url)  # the head's Ray token, where dlrun's head has one
        client = JobSubmissionClient(head.dashboard_url, headers=headers or None)
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        if token:  # `ray job submit` reads it from the environment
            os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
        with ray_logs_to(None):  # the SDK's "Uploading package" lines would break the table
            run_sdk(client, "true", {}, "warmup")
            if "submit" not in skip:
                bench_submit(client, head.dashboard_url, home, args.repeat)
            if "follow" not in skip:
                bench_follow(head.dashboard_url, home, args.lines)


if __name__ == "__main__":
    main()
