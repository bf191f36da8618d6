"""A local job's command in its image: `python -m infra.images.run_job --runtime R --image I [--gpus] -- CMD`.

Run by the local Ray job as its innermost command (dlrun's helpers, jobs/tee.py and jobs/inputs.py, stay on
the host around it). It mounts what the job sees today, at the same paths: the working directory Ray
unpacked (read-write: the job's outputs), the PYTHONPATH entries Ray added (jobs/ for `jobs.metrics`,
read-only), a local checkpoint directory, the synced data, and the Ray token file; it passes the job's
variables by name (DLRUN_*, RAY_*, the job's env); then it checks the image has python3 (one line and exit 2
otherwise) and becomes the runtime.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from infra.images.runtime import ContainerRun, Mount, container_argv

PYTHON_CHECK = ("python3", "-c", "import sys; sys.exit(0 if sys.version_info[0] == 3 else 1)")
NOT_FOUND_EXITS = (126, 127)  # podman and docker: the command cannot be found / run in the image
KEEP_OUT = {"PATH", "HOME", "HOSTNAME", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONHOME"}


def job_mounts(env: dict[str, str], cwd: str) -> tuple[Mount, ...]:
    mounts = [Mount(cwd, cwd)]
    for entry in (env.get("PYTHONPATH") or "").split(os.pathsep):
        if entry and os.path.isdir(entry) and entry != cwd:
            mounts.append(Mount(entry, entry, read_only=True))
    checkpoint = env.get("DLRUN_CHECKPOINT_DIR", "")
    if checkpoint and "://" not in checkpoint:
        Path(checkpoint).mkdir(parents=True, exist_ok=True)
        mounts.append(Mount(checkpoint, checkpoint))
    data = env.get("DLRUN_DATA_DIR", "")
    if data and os.path.isdir(data):
        mounts.append(Mount(data, data, read_only=True))
    token = env.get("RAY_AUTH_TOKEN_PATH", "")
    if token and os.path.isfile(token):
        mounts.append(Mount(token, token, read_only=True))
    seen, out = set(), []
    for m in mounts:
        if m.target not in seen:
            seen.add(m.target)
            out.append(m)
    return tuple(out)


def job_env_names(env: dict[str, str], extra: list[str]) -> tuple[str, ...]:
    names = {n for n in env if n.startswith(("DLRUN_", "RAY_"))} | {n for n in extra if n in env}
    names |= {n for n in ("PYTHONPATH", "PYTHONUNBUFFERED") if n in env}
    return tuple(sorted(names - KEEP_OUT))


def build(args, env: dict[str, str], cwd: str) -> ContainerRun:
    job = re.sub(r"[^a-zA-Z0-9_.-]", "-", env.get("DLRUN_JOB_ID", ""))
    return ContainerRun(image=args.image, command=tuple(args.command), env_names=job_env_names(env, args.env),
                        mounts=job_mounts(env, cwd), workdir=cwd, gpus=args.gpus, pull=args.pull,
                        user=f"{os.getuid()}:{os.getgid()}",
                        labels={"dlrun.job": job} if job else {})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.images.run_job")
    p.add_argument("--runtime", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--pull", choices=("always", "if-missing"), default="if-missing")
    p.add_argument("--gpus", action="store_true")
    p.add_argument("--env", action="append", default=[], help="a job variable passed by name")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        p.error("give the command after --")
    env, cwd = dict(os.environ), os.getcwd()
    run = build(args, env, cwd)
    check = ContainerRun(image=run.image, command=PYTHON_CHECK, pull=run.pull, user=run.user)
    proc = subprocess.run(container_argv(args.runtime, check), stdout=subprocess.DEVNULL)
    if proc.returncode in NOT_FOUND_EXITS or proc.returncode == 1:
        print(f"dlrun: image {args.image} has no python3 (`python3` in the image exited {proc.returncode}); "
              "dlrun's jobs run with the image's Python 3: use an image that has it", file=sys.stderr, flush=True)
        return 2
    if proc.returncode != 0:
        print(f"dlrun: {os.path.basename(args.runtime)} could not run image {args.image} (exit "
              f"{proc.returncode}, its message above)", file=sys.stderr, flush=True)
        return proc.returncode
    real = container_argv(args.runtime, ContainerRun(**{**run.__dict__, "pull": "if-missing"}))
    sys.stdout.flush()
    os.execvp(real[0], real)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
