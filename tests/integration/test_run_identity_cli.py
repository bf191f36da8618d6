"""A workdir that is not there, through the real `dlrun` process: one line, exit 2, nothing recorded."""
import os
import subprocess
import sys
from pathlib import Path

from tests.support.job_files import make_job

ROOT = Path(__file__).resolve().parents[2]


def test_cli_bad_workdir_exits_2_and_records_nothing(tmp_path, dlrun_home):
    job = make_job(tmp_path)
    job.write_text(job.read_text().replace("workdir: work", "workdir: nowhere"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for cmd in (["submit", str(job), "--fresh"], ["plan", str(job)]):
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *cmd], capture_output=True,
                           text=True, cwd=ROOT, env=env, timeout=120)
        assert r.returncode == 2, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "workdir" in r.stderr and "Traceback" not in r.stderr
    from orchestrator.state.db import Store

    assert Store(dlrun_home / "state.db").list_jobs() == []
