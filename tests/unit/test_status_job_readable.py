"""`dlrun status JOB` reads as words: a failed job's error line under its status, events as name=value (not
JSON), a multi-line detail by its last line, and the time zone of the times."""
import time

from orchestrator.cli import status as st
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus


def test_a_failed_job_says_why_and_its_history_in_words(capsys):
    store = default_store()
    job_id = store.create_job(name="digits", spec_hash="h", spec_json="{}", max_cost=2.0, est_cost=0.3)
    store.set_status(job_id, JobStatus.RUNNING)
    store.add_event(job_id, "plan", {"chosen": "aws us-east-1 g4dn.xlarge T4", "spot": True, "unusable": ["gcp"],
                                     "candidates": [{"offer": "local CPU", "hours": 1.0},
                                                    {"offer": "aws", "hours": 0.2}]})
    store.fail(job_id, JobStatus.FAILED, "Traceback (most recent call last):\n  File \"train.py\", line 3\n"
                                         "RuntimeError: CUDA out of memory")
    st.show_job(job_id)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2].strip() == "status: FAILED" and lines[3].strip() == "why: … RuntimeError: CUDA out of memory"
    assert f"history (local time, {time.strftime('%Z %z')}):" in out
    assert "plan              chosen=aws us-east-1 g4dn.xlarge T4 spot=yes unusable=gcp candidates=2" in out
    assert "{" not in out and "Traceback" not in out
