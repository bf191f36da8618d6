"""The probe's world (orchestrator/planning/job_probe.py): the issue-42 kind of script, a CPU-bound neighbour, and
the job's run timed as the local Ray head runs it. Shared by tests/integration/test_job_probe.py,
tests/e2e/test_job_probe_on_a_head.py and bench/probe_under_load.py.

RAY_ENTRYPOINT_ENV is the boundary: what Ray adds to the environment of a job's entrypoint. The entrypoint is
a child of the job's supervisor actor (ray/dashboard/modules/job/job_supervisor.py: `env = os.environ.copy()`),
and a worker's OMP_NUM_THREADS, where unset, is set to the CPUs its task holds, 1 for the supervisor, which holds
none (ray/_private/utils.py set_omp_num_threads_if_unset, Ray 2.x). tests/e2e/test_job_probe_on_a_head.py
checks it against a real head. It does not reproduce: Ray's runtime env setup (working_dir upload, pip), its
log streaming, a team cluster's entrypoint_num_cpus (OMP_NUM_THREADS then the CPUs asked for).
"""
from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
NESTED_LSTM = ROOT / "configs" / "examples" / "tqdm_loop" / "nested_lstm.py"
RAY_ENTRYPOINT_ENV = {"OMP_NUM_THREADS": "1"}  # set by Ray where the caller's environment has none
HOG = "while True: pass"


@contextmanager
def cpu_hogs(count: int = 1):
    """`count` processes spinning on a CPU each (`python -c 'while True: pass'`), ended when the block ends."""
    # each in a session of its own, as a process the user started elsewhere: with the scheduler's autogroups
    # (Linux's default) a process shares its session's CPU share with the rest of that session
    procs = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) for _ in range(count)]
    try:
        if procs:
            time.sleep(0.3)  # running before the job starts
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def nested_lstm_job(tmp_path: Path, *args: str, name: str = "nested-lstm", **fields) -> Path:
    """A job file for configs/examples/tqdm_loop/nested_lstm.py (copied into its own workdir) with `args`."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    shutil.copy(NESTED_LSTM, work / "nested_lstm.py")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "run": " ".join(["python nested_lstm.py", *args]),
                                    "workdir": "work", **fields}))
    return path


def head_env(spec, tmp: str) -> dict[str, str]:
    """The environment the local Ray head gives the job's entrypoint: the head's own (the caller's), dlrun's
    runtime_env env_vars, `jobs` importable (py_modules), and what Ray adds (RAY_ENTRYPOINT_ENV)."""
    from orchestrator.runs.entrypoint import runtime_env

    renv = runtime_env(spec, job_id="timed-run", checkpoint=os.path.join(tmp, "checkpoints"), price_per_hour=0.0,
                       local=True)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DLRUN_PROBE")}
    env.update(renv["env_vars"])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    for k, v in RAY_ENTRYPOINT_ENV.items():
        env.setdefault(k, v)
    return env


@dataclass(frozen=True)
class Run:
    wall: float  # seconds from the job's start to its end
    cpu: float  # CPU seconds its processes used (user + system, the shell, jobs/tee.py and the script)


def timed_run(spec, timeout: float = 600) -> Run:
    """The job to its end as the local head runs it (its command under jobs/tee.py, in a copy of its workdir,
    head_env, its own session), timed by the wall clock from its start (the head's own job start is not part of
    it) and by the CPU its processes used."""
    from orchestrator.runs.entrypoint import entrypoint

    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"dlrun-timed-{os.getpid()}-{time.monotonic_ns()}"
    try:
        cwd = shutil.copytree(spec.workdir, tmp / "work") if spec.workdir else str(tmp)
        os.makedirs(cwd, exist_ok=True)
        env = head_env(spec, str(tmp))
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        # in a session of its own, as Ray's job supervisor starts an entrypoint (job_supervisor.py
        # _exec_entrypoint: start_new_session=True), and as the probe starts it
        subprocess.run(entrypoint(spec, local=True, workers=1), shell=True, cwd=cwd, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout, start_new_session=True)
        wall, after = time.monotonic() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
        return Run(wall=wall, cpu=(after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
