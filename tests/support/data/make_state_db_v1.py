"""Writes state_db_v1.sqlite: a $DLRUN_HOME/state.db as dlrun wrote it at schema version 1 (before typed
records), for tests/unit/test_store_migration.py. It runs that version's own Store (state/db.py of
commit V1_COMMIT, read from git) and makes the writes its executor made, in its order and with its
event JSON (runs/executor.py record_job, runs/run_identity.record_run, runs/attempt.py run_attempt and
_on_event, executor._finish):

    .venv/bin/python tests/support/data/make_state_db_v1.py   # from the repository root

Jobs: a local run that succeeded (plan event with est_start_seconds), a spot run on aws preempted twice
and finished on gcp (checkpoint events: aws twice, the same bucket, then gcp), a failed run planned
before the estimator had a start-up term (no est_start_seconds), and a scheduled run with its firing.
"""
from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

V1_COMMIT = "abb26c4"  # main when schema version 2 was written
ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).with_name("state_db_v1.sqlite")


def v1_store_module() -> types.ModuleType:
    source = subprocess.run(["git", "show", f"{V1_COMMIT}:orchestrator/state/db.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("state_db_v1")
    exec(compile(source, f"{V1_COMMIT}:orchestrator/state/db.py", "exec"), module.__dict__)
    return module


def attempt(store, job_id, n, cloud, offer_key, spot, price, cluster_id, checkpoint=None):
    store.update_job(job_id, attempts=n, backend=cloud, offer_key=offer_key, instance_type=offer_key.split("/")[-1],
                     accelerator="T4", accelerator_count=1, spot=int(spot), price_per_hour=price,
                     price_date="2026-11-01", cluster_id=cluster_id)
    store.record_cluster(cluster_id, provider=cloud, job_id=job_id, state="launching", price_per_hour=price,
                         region=offer_key.split("/")[1], launched_at=1795600000.0 + n, instance_type=offer_key,
                         spot=int(spot), num_nodes=1)
    store.set_status(job_id, "PROVISIONING", offer_key)
    if checkpoint:
        store.add_event(job_id, "checkpoint", {"location": checkpoint, "attempt": n})
    store.record_cluster(cluster_id, provider=cloud, job_id=job_id, state="up", zone="z-a",
                         launched_at=1795600010.0 + n, cluster_json=json.dumps({"cluster_id": cluster_id}))
    store.set_status(job_id, "SUBMITTED", f"dlrun-{job_id}-{n}", ray_submission_id=f"dlrun-{job_id}-{n}",
                     ray_address="http://10.0.0.1:8265")
    store.set_status(job_id, "RUNNING")
    store.update_job(job_id, metrics_json=json.dumps({"epoch": n, "epochs": 3}))
    store.update_job(job_id, actual_cost=0.01 * n)
    store.record_cluster(cluster_id, provider=cloud, job_id=job_id, state="terminated", terminated_at=1795600100.0)


def record_job(store, name, *, est_start, run_key, schedule_id=None):
    job_id = store.create_job(name=name, spec_hash="h-" + name, spec_json=json.dumps({"name": name}),
                              schedule_id=schedule_id, max_cost=1.0, est_cost=0.05, est_seconds=90.0,
                              est_run_seconds=60.0, model_family="conv", supervisor_pid=4242)
    plan = {"chosen": "local CPU", "spot": False, "est_hours": 0.025, "est_cost": 0.05}
    if est_start is not ...:
        plan["est_start_seconds"] = est_start
    store.add_event(job_id, "plan", plan)
    store.add_event(job_id, "run", {"run_key": run_key, "checkpoint": f"/home/u/.dlrun/checkpoints/{run_key}"})
    store.set_status(job_id, "PLANNING")
    return job_id


def main() -> None:
    db = v1_store_module()
    OUT.unlink(missing_ok=True)
    store = db.Store(OUT)
    assert store.schema_version == 1 == len(db.MIGRATIONS)

    local = record_job(store, "digits-local", est_start=7.5, run_key="digits-local-11aa")
    attempt(store, local, 1, "local", "local/here/cpu", False, 0.0, "c-local")
    store.set_status(local, "SUCCEEDED", "", actual_seconds=70.0, actual_run_seconds=64.0,
                     metrics_json=json.dumps({"accuracy": 0.97}))

    spot = record_job(store, "digits-spot", est_start=30.0, run_key="digits-spot-22bb")
    attempt(store, spot, 1, "aws", "aws/us-east-1/g4dn.xlarge", True, 0.16, "c-aws-1", "s3://dlrun-x/runs/22bb")
    store.update_job(spot, preemptions=1)
    store.set_status(spot, "RECOVERING", "spot reclaimed")
    attempt(store, spot, 2, "aws", "aws/us-west-2/g4dn.xlarge", True, 0.17, "c-aws-2", "s3://dlrun-x/runs/22bb")
    store.update_job(spot, preemptions=2)
    store.set_status(spot, "RECOVERING", "spot reclaimed")
    attempt(store, spot, 3, "gcp", "gcp/us-central1/n1-standard-4", False, 0.55, "c-gcp-3", "gs://dlrun-y/runs/22bb")
    store.set_status(spot, "SUCCEEDED", "", actual_seconds=900.0, actual_run_seconds=700.0)

    old = record_job(store, "digits-old", est_start=..., run_key="digits-old-33cc")
    store.add_event(old, "note", "not JSON {")
    store.set_status(old, "FAILED", "exit code 1", message="exit code 1", actual_seconds=12.0)

    with store.tx() as c:
        c.execute("INSERT INTO schedules (id, name, cron, tz, job_path, job_yaml, job_hash, follow_file, max_cost, "
                  "monthly_cap, paused, created_at, next_run_at) VALUES (?,?,?,?,?,?,?,?,?,?,0,?,?)",
                  ("s-1", "nightly", "0 2 * * *", "UTC", "/home/u/job.yaml", "name: nightly\n", "abc", 0, 1.0,
                   None, 1795500000.0, 1795608000.0))
    nightly = record_job(store, "nightly", est_start=None, run_key="j-nightly", schedule_id="s-1")
    store.set_status(nightly, "CANCELLED", "dlrun cancel")
    with store.tx() as c:
        c.execute("INSERT INTO schedule_runs (schedule_id, due_at, fired_at, job_id, outcome, detail) "
                  "VALUES (?,?,?,?,?,?)", ("s-1", 1795521600.0, 1795521600.5, nightly, "CANCELLED", ""))
    store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    print(f"wrote {OUT.relative_to(ROOT)}: jobs {local} {spot} {old} {nightly}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
