"""A state.db written by schema version 1 (tests/support/data/make_state_db_v1.py says how it was made)
upgrades in place when the new Store opens it: the facts version 1 kept only in event JSON become
columns and rows, and the old jobs read and write as new ones do."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from orchestrator.state.db import MIGRATIONS, Store
from orchestrator.states import JobStatus

V1_DB = Path(__file__).resolve().parents[1] / "support" / "data" / "state_db_v1.sqlite"


@pytest.fixture
def upgraded(tmp_path):
    path = tmp_path / "state.db"
    shutil.copy(V1_DB, path)  # never the checked-in file itself: opening it upgrades it
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 1
    store = Store(path)
    yield store
    store.close()


def _by_name(store: Store) -> dict:
    return {j.name: j for j in store.list_jobs()}


def test_the_old_database_gets_the_new_columns_and_table(upgraded):
    assert upgraded.schema_version == len(MIGRATIONS) == 3
    conn = sqlite3.connect(upgraded.path)
    columns = {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
    assert {"est_start_seconds", "run_key"} <= columns
    assert "overrides_json" in {r[1] for r in conn.execute("PRAGMA table_info(schedules)")}
    assert {r[1] for r in conn.execute("PRAGMA table_info(job_checkpoints)")} == {
        "id", "job_id", "cloud", "location", "attempt"}
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_start_up_estimates_and_run_keys_are_backfilled_from_the_events(upgraded):
    jobs = _by_name(upgraded)
    assert set(jobs) == {"digits-local", "digits-spot", "digits-old", "nightly"}
    assert (jobs["digits-local"].est_start_seconds, jobs["digits-spot"].est_start_seconds) == (7.5, 30.0)
    assert jobs["digits-old"].est_start_seconds is None  # planned before the estimator had the term
    assert jobs["nightly"].est_start_seconds is None  # the plan event said null
    assert {n: j.run_key for n, j in jobs.items()} == {
        "digits-local": "digits-local-11aa", "digits-spot": "digits-spot-22bb", "digits-old": "digits-old-33cc",
        "nightly": "j-nightly"}


def test_the_checkpoint_locations_per_cloud_are_backfilled(upgraded):
    jobs = _by_name(upgraded)
    assert upgraded.checkpoint_locations(jobs["digits-spot"].id) == {
        "aws": "s3://dlrun-x/runs/22bb", "gcp": "gs://dlrun-y/runs/22bb"}
    assert upgraded.checkpoint_locations(jobs["digits-local"].id) == {}


def test_the_old_records_read_as_new_ones(upgraded):
    jobs = _by_name(upgraded)
    spot, local = jobs["digits-spot"], jobs["digits-local"]
    assert (spot.status, spot.preemptions, spot.attempts, spot.backend, spot.spot) == (
        JobStatus.SUCCEEDED, 2, 3, "gcp", False)
    assert local.metrics == {"accuracy": 0.97} and jobs["digits-old"].message == "exit code 1"
    assert [c.state for c in upgraded.job_clusters(spot.id)] == ["terminated"] * 3
    assert [e.kind for e in upgraded.events(spot.id)].count("checkpoint") == 3  # the history stays
    [run] = [r for r in upgraded.finished_runs() if r.id == local.id]
    assert (run.est_run_seconds, run.actual_run_seconds, run.est_start_seconds) == (60.0, 64.0, 7.5)


def test_the_upgraded_database_keeps_working(upgraded):
    from orchestrator.state import schedules as ss

    job_id = upgraded.create_job(name="after", spec_hash="h", spec_json="{}", est_start_seconds=3.0)
    upgraded.record_checkpoint(job_id, "aws", "s3://dlrun-z/runs/k", 1)
    assert upgraded.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=1.0) is JobStatus.SUCCEEDED
    assert upgraded.get_job(job_id).est_start_seconds == 3.0
    assert upgraded.checkpoint_locations(job_id) == {"aws": "s3://dlrun-z/runs/k"}
    nightly = ss.get_schedule(upgraded, "nightly")
    assert (nightly.cron, nightly.paused, [r.outcome for r in ss.runs(upgraded, "nightly")]) == (
        "0 2 * * *", False, ["CANCELLED"])
    assert nightly.overrides_json is None  # added before schedules kept flags: its runs are as they were
    again = Store(upgraded.path)  # a second process opening it migrates nothing more
    assert again.schema_version == 3 and len(again.list_jobs()) == 5
    again.close()


def test_a_failed_upgrade_leaves_the_database_as_it_was(tmp_path, monkeypatch):
    from orchestrator.state import migrations

    path = tmp_path / "state.db"
    shutil.copy(V1_DB, path)

    def broken(c):  # the backfill's step fails after the columns were added
        raise RuntimeError("disk full")

    monkeypatch.setattr(migrations, "MIGRATIONS", [migrations.MIGRATIONS[0], [migrations.V2_COLUMNS, broken]])
    with pytest.raises(RuntimeError):
        Store(path)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert "run_key" not in {r[1] for r in conn.execute("PRAGMA table_info(jobs)")}
