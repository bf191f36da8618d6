"""The state store: versioned schema and status history (two processes at once:
tests/integration/test_store_processes.py)."""
from orchestrator.state.db import MIGRATIONS, Store


def test_schema_version_and_wal(tmp_path):
    s = Store(tmp_path / "s.db")
    assert s.schema_version == len(MIGRATIONS)
    assert s.query("PRAGMA journal_mode")[0][0] == "wal"
    s2 = Store(tmp_path / "s.db")  # reopening does not re-run migrations
    assert s2.schema_version == len(MIGRATIONS)


def test_status_history_has_timestamps(tmp_path):
    s = Store(tmp_path / "s.db")
    j = s.create_job(name="a", spec_hash="h", spec_json="{}", max_cost=5.0)
    for st in ("PLANNING", "PROVISIONING", "RUNNING", "SUCCEEDED"):
        s.set_status(j, st)
    row = s.get_job(j)
    assert row["status"] == "SUCCEEDED" and row["started_at"] and row["ended_at"] >= row["started_at"]
    hist = [e["status"] for e in s.events(j)]
    assert hist == ["PENDING", "PLANNING", "PROVISIONING", "RUNNING", "SUCCEEDED"]
    ts = [e["ts"] for e in s.events(j)]
    assert ts == sorted(ts)
    assert s.get_job(j[:6]) is not None  # a prefix finds it


def test_launch_price_is_never_rewritten(tmp_path):
    s = Store(tmp_path / "s.db")
    s.record_cluster("c1", provider="aws", job_id=None, state="launching", price_per_hour=0.526)
    s.record_cluster("c1", provider="aws", job_id=None, state="up", price_per_hour=9.99)
    assert s.get_cluster("c1")["price_per_hour"] == 0.526


