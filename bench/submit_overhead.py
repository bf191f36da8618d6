"""What dlrun adds on top of Ray and PyTorch, on one local Ray head.

    python bench/submit_overhead.py [--repeat 2] [--job configs/examples/digits_cnn.yaml]

(a) Submit-to-finished wall time of `dlrun submit JOB --backend local` (a subprocess: python start,
    imports, planning, submission, watching) over the same entrypoint and runtime_env submitted with
    a bare JobSubmissionClient and polled every 0.1 s (goal: ratio <= 1.15). The two alternate
    (raw, dlrun, raw, dlrun, ...) on the same head; medians are compared. dlrun's time is broken
    down from its own store: start+plan (process start -> job recorded), launch+submit (-> SUBMITTED),
    Ray run (-> Ray's end time of the job), tail (-> process exit: the last poll, bookkeeping, exit).
(b) Training throughput of the job under dlrun (samples/s from its DLRUN_RESULT line) over a plain
    PyTorch loop of the same model, batch size, optimizer, data and torch thread count run in this
    process (goal: ratio >= 0.95). The raw Ray job's figure is shown too: it separates Ray's share
    from dlrun's.

Before timing, the profile cache is warmed (one in-process plan) and one raw job runs untimed (the
head uploads the working_dir package and starts its worker pool once), so neither side pays it.
The head is started here (its own process group, under a temporary $DLRUN_HOME) and stopped in
`finally`. Each run starts from an empty checkpoint directory, so every run trains every epoch.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
AGENT_PORT = 52365  # ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT
FIXED_PORTS = (6379, AGENT_PORT)  # GCS (start_local_head's preferred port), dashboard agent


def result_line(text: str) -> dict:
    line = next((ln for ln in reversed(text.splitlines()) if "DLRUN_RESULT " in ln), None)
    if line is None:
        raise RuntimeError("no DLRUN_RESULT line in the job's log:\n" + text[-2000:])
    return json.loads(line.split("DLRUN_RESULT ", 1)[1])


def busy_fixed_ports() -> list[int]:
    """The ports a second head on this machine collides on: Ray resolves --node-ip-address=127.0.0.1 to
    the machine's address, so start_local_head's 127.0.0.1 check of the GCS port 6379 misses a head
    there (`ray start` then exits: "already running"), and the dashboard agent's port 52365 is not
    set at all (the head comes up, but without a job agent: "No available agent")."""
    busy = []
    for port in FIXED_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                busy.append(port)
    return busy


def wait_for_job_agent(client, timeout: float = 60.0) -> float:
    """Seconds until the head accepts jobs: its dashboard answers before its job agent is up."""
    t0 = time.perf_counter()
    while True:
        try:
            client.submit_job(entrypoint="true", submission_id=f"bench-probe-{os.getpid()}")
            break
        except RuntimeError as e:
            if "No available agent" not in str(e):
                raise
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"the Ray head has no job agent after {timeout:.0f} s: another Ray head on this "
                                 f"machine probably holds the dashboard agent port {AGENT_PORT}") from None
            time.sleep(0.5)
    while str(client.get_job_status(f"bench-probe-{os.getpid()}").value) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        time.sleep(0.1)
    return time.perf_counter() - t0


def run_raw(client, spec, home: Path, tag: str) -> dict:
    """One bare JobSubmissionClient run of dlrun's entrypoint and runtime_env; polled every 0.1 s."""
    from orchestrator.runs.entrypoint import entrypoint, runtime_env

    ckpt = home / "raw-checkpoints" / tag
    shutil.rmtree(ckpt, ignore_errors=True)
    t0 = time.perf_counter()
    # built inside the timed span: dlrun builds (stages the jobs/ copy) on every submit too
    sid = client.submit_job(entrypoint=entrypoint(spec, local=True, workers=1),
                            runtime_env=runtime_env(spec, job_id=f"raw-{tag}", checkpoint=str(ckpt),
                                                    price_per_hour=0.0, local=True),
                            submission_id=f"bench-raw-{tag}-{os.getpid()}")
    while str(client.get_job_status(sid).value) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        time.sleep(0.1)
    total = time.perf_counter() - t0
    status = str(client.get_job_status(sid).value)
    logs = client.get_job_logs(sid)
    if status != "SUCCEEDED":
        raise RuntimeError(f"raw job {sid} {status}:\n{logs[-2000:]}")
    info = client.get_job_info(sid)
    res = result_line(logs)
    return {"total": total, "ray_run": (info.end_time - info.start_time) / 1000.0,
            "samples_per_s": res["samples_per_s"], "job_elapsed": res["elapsed_s"]}


def run_dlrun(client, job_file: Path, home: Path, address: str) -> dict:
    from orchestrator.state.db import default_store
    from orchestrator.states import JobStatus

    shutil.rmtree(home / "checkpoints", ignore_errors=True)  # else the resubmission resumes at the end
    env = dict(os.environ, DLRUN_RAY_ADDRESS=address, DLRUN_HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    wall0 = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job_file), "--backend", "local"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    total = time.perf_counter() - t0
    wall1 = wall0 + total
    if proc.returncode != 0:
        raise RuntimeError(f"dlrun submit exited {proc.returncode}:\n{proc.stdout[-1000:]}\n{proc.stderr[-2000:]}")
    job_id = proc.stdout.split()[0]  # "<job id> SUCCEEDED accuracy=..."
    store = default_store()
    job = store.get_job(job_id)
    submitted = next(e.ts for e in store.events(job_id) if e.kind == "status" and e.status == JobStatus.SUBMITTED)
    info = client.get_job_info(job.ray_submission_id)
    ray_end = info.end_time / 1000.0
    res = result_line((home / "logs" / f"{job_id}.log").read_text())
    return {"total": total, "start_plan": job.created_at - wall0, "launch_submit": submitted - job.created_at,
            "ray": ray_end - submitted, "tail": wall1 - ray_end,
            "ray_run": (info.end_time - info.start_time) / 1000.0,
            "samples_per_s": res["samples_per_s"], "job_elapsed": res["elapsed_s"]}


def plain_loop(epochs: int, batch: int, lr: float, threads: int) -> float:
    """Samples/s of a bare PyTorch loop: the job's model, data, optimizer, batch and thread count,
    timed like the job times itself (training steps only, mean of the per-epoch rates)."""
    import torch
    from torch import nn

    from jobs.cnn import SimpleCNN
    from jobs.data import digit_images

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        data = digit_images()
        x, y = data.train_x, data.train_y
        torch.manual_seed(0)
        model = SimpleCNN()
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        loss_fn = nn.CrossEntropyLoss()
        rates = []
        for epoch in range(epochs):
            order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
            model.train()
            tick = time.perf_counter()
            for i in range(0, len(order), batch):
                idx = order[i:i + batch]
                loss = loss_fn(model(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            rates.append(len(order) / (time.perf_counter() - tick))
        return sum(rates) / len(rates)
    finally:
        torch.set_num_threads(before)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2, help="raw/dlrun pairs (medians are compared)")
    ap.add_argument("--job", default=str(ROOT / "configs" / "examples" / "digits_cnn.yaml"))
    ap.add_argument("--wait-port", type=float, default=300,
                    help=f"seconds to wait for other Ray heads to free ports {FIXED_PORTS}")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="dlrun-bench-"))
    os.environ["DLRUN_HOME"] = str(home)

    from ray.job_submission import JobSubmissionClient

    for name in ("ray", "ray.dashboard.modules.dashboard_sdk"):  # no "Uploading package ..." lines in the table
        logging.getLogger(name).setLevel(logging.WARNING)

    from jobs.cnn import JOB
    from jobs.train import TrainConfig
    from bench_head import bench_head
    from orchestrator.runs.executor import make_plan, restrict
    from orchestrator.planning.spec import load_job

    spec = load_job(args.job)
    if spec.job != "cnn" or spec.workload is None:
        sys.exit(f"{args.job}: this benchmark's plain-PyTorch baseline is the built-in cnn job")
    epochs, batch = spec.workload.epochs, spec.workload.batch_size
    threads = TrainConfig(epochs=1, batch_size=1, lr=1.0).cpu_threads  # the jobs' --cpu-threads default

    if busy_fixed_ports():
        print(f"port(s) {busy_fixed_ports()} taken by another Ray head on this machine; waiting up to "
              f"{args.wait_port:.0f} s for them (start_local_head cannot avoid them)", flush=True)
        deadline = time.monotonic() + args.wait_port
        while busy := busy_fixed_ports():
            if time.monotonic() > deadline:
                sys.exit(f"port(s) {busy} still taken by another Ray head: a head started now would fail")
            time.sleep(1.0)
    with bench_head(home) as head:
        from infra.local.head import local_head_headers

        # dlrun's head runs with token auth: the bare SDK baseline sends the same token
        client = JobSubmissionClient(head.dashboard_url, headers=local_head_headers(head.dashboard_url) or None)

        print(f"job agent ready (a trivial job ran) after {wait_for_job_agent(client):.1f} s more", flush=True)
        local = restrict(spec, "local")
        t0 = time.perf_counter()
        make_plan(local)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        make_plan(local)
        warm = time.perf_counter() - t0
        print(f"plan in-process: {cold:.2f} s cold (profiling, then cached), {warm * 1000:.0f} ms warm "
              "(in-process cache)", flush=True)
        t0 = time.perf_counter()
        run_raw(client, spec, home, "warmup")
        print(f"warm-up raw job (untimed): {time.perf_counter() - t0:.1f} s", flush=True)

        raws, dls, plains = [], [], []
        print(f"\n{'run':<7} {'raw s':>6} {'dlrun s':>7} {'start+plan':>10} {'launch+sub':>10} {'Ray run':>7} "
              f"{'tail':>5} {'raw smp/s':>9} {'dlrun smp/s':>11} {'plain smp/s':>11}")
        for i in range(args.repeat):
            raws.append(run_raw(client, spec, home, str(i)))
            dls.append(run_dlrun(client, Path(args.job), home, head.dashboard_url))
            plains.append(plain_loop(epochs, batch, JOB.lr, threads))
            r, d = raws[-1], dls[-1]
            print(f"{i + 1:<7} {r['total']:>6.2f} {d['total']:>7.2f} {d['start_plan']:>10.2f} "
                  f"{d['launch_submit']:>10.2f} {d['ray']:>7.2f} {d['tail']:>5.2f} {r['samples_per_s']:>9.0f} "
                  f"{d['samples_per_s']:>11.0f} {plains[-1]:>11.0f}", flush=True)

        med = statistics.median
        raw_t, dl_t = med(r["total"] for r in raws), med(d["total"] for d in dls)
        ratio = dl_t / raw_t
        print(f"\n(a) submit-to-finished, median of {args.repeat}: raw JobSubmissionClient {raw_t:.2f} s, "
              f"dlrun submit {dl_t:.2f} s")
        print(f"    dlrun: start+plan {med(d['start_plan'] for d in dls):.2f} s, launch+submit "
              f"{med(d['launch_submit'] for d in dls):.2f} s, Ray run {med(d['ray'] for d in dls):.2f} s, "
              f"tail {med(d['tail'] for d in dls):.2f} s")
        print(f"    Ray's start-to-end of the job: raw {med(r['ray_run'] for r in raws):.2f} s, dlrun "
              f"{med(d['ray_run'] for d in dls):.2f} s; the job's own elapsed_s (data, train, eval): raw "
              f"{med(r['job_elapsed'] for r in raws):.2f} s, dlrun {med(d['job_elapsed'] for d in dls):.2f} s")
        print(f"    ratio dlrun/raw = {ratio:.2f} ({'within' if ratio <= 1.15 else 'OUTSIDE'} the <= 1.15 goal)")
        dl_s, raw_s, plain_s = (med(d["samples_per_s"] for d in dls), med(r["samples_per_s"] for r in raws),
                                med(plains))
        tput = dl_s / plain_s
        print(f"(b) samples/s, median of {args.repeat} ({threads} torch thread): plain PyTorch {plain_s:.0f}, "
              f"raw Ray job {raw_s:.0f} ({raw_s / plain_s:.2f}x), under dlrun {dl_s:.0f}")
        print(f"    ratio dlrun/plain = {tput:.2f} ({'within' if tput >= 0.95 else 'OUTSIDE'} the >= 0.95 goal)")


if __name__ == "__main__":
    main()
