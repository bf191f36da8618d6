"""The state store: versioned schema and status history (two processes at once:
tests/integration/test_store_processes.py)."""
import sqlite3

from orchestrator.state.db import MIGRATIONS, Store
from orchestrator.states import JobStatus


def test_schema_version_and_wal(tmp_path):
    s = Store(tmp_path / "s.db")
    assert s.schema_version == len(MIGRATIONS)
    assert sqlite3.connect(tmp_path / "s.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    s2 = Store(tmp_path / "s.db")  # reopening does not re-run migrations
    assert s2.schema_version == len(MIGRATIONS)


def test_status_history_has_timestamps(tmp_path):
    s = Store(tmp_path / "s.db")
    j = s.create_job(name="a", spec_hash="h", spec_json="{}", max_cost=5.0)
    for st in (JobStatus.PLANNING, JobStatus.PROVISIONING, JobStatus.RUNNING, JobStatus.SUCCEEDED):
        s.set_status(j, st)
    row = s.get_job(j)
    assert row.status == "SUCCEEDED" and row.started_at and row.ended_at >= row.started_at
    hist = [e.status for e in s.events(j)]
    assert hist == ["PENDING", "PLANNING", "PROVISIONING", "RUNNING", "SUCCEEDED"]
    ts = [e.ts for e in s.events(j)]
    assert ts == sorted(ts)
    assert s.get_job(j[:6]) is not None  # a prefix finds it


def test_launch_price_is_never_rewritten(tmp_path):
    s = Store(tmp_path / "s.db")
    s.cluster_launching("c1", provider="aws", job_id=None, region="us-east-1", instance_type="g4dn.xlarge",
                        spot=False, num_nodes=1, price_per_hour=0.526, launched_at=1.0)
    s.cluster_up("c1", zone="us-east-1a", launched_at=2.0, cluster_json="{}")
    s.cluster_terminated("c1")
    assert s.get_cluster("c1").price_per_hour == 0.526


