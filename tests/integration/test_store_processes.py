"""The state store with two processes writing at once: nothing corrupt, nothing lost."""
import multiprocessing as mp
import sqlite3

from orchestrator.state.db import Store
from orchestrator.states import JobStatus


def _writer(path, n, tag):
    s = Store(path)
    for i in range(n):
        j = s.create_job(name=f"{tag}{i}", spec_hash="h", spec_json="{}")
        s.set_status(j, JobStatus.RUNNING)
        s.set_status(j, JobStatus.SUCCEEDED)


def test_two_processes_at_once_do_not_corrupt(tmp_path):
    path = tmp_path / "s.db"
    Store(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, 60, t)) for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM jobs WHERE status='SUCCEEDED'").fetchone()[0] == 120
    assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 360
