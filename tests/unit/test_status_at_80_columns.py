"""`dlrun status` on a terminal 80 columns wide: the job id (for `dlrun logs`), its status and its cost stay
whole, free text gives way first; no jobs at all is a hint, not an empty table."""
import io

from rich.console import Console

from orchestrator.cli import status as st
from orchestrator.cli.render import summary
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus


def screen(monkeypatch, width: int = 80) -> str:
    out = io.StringIO()
    monkeypatch.setattr(summary, "console", lambda: Console(width=width, file=out))  # the terminal
    st.show_jobs()
    return out.getvalue()


def test_id_status_and_cost_stay_whole(monkeypatch):
    store = default_store()
    job_id = store.create_job(name="digits-cnn-with-a-rather-long-name", spec_hash="h", spec_json="{}",
                              max_cost=2.0, est_cost=0.3)
    store.start_attempt(job_id, attempt=1, backend="aws", offer_key="aws/us-east-1/g4dn.xlarge",
                        instance_type="g4dn.xlarge", accelerator="T4", accelerator_count=1, spot=True,
                        price_per_hour=0.36, price_date="2026-11-01", cluster_id="c-aws")
    store.set_status(job_id, JobStatus.RUNNING)
    store.set_actual_cost(job_id, 0.05)
    store.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=3600.0,
                 result={"accuracy": 0.97, "loss": 0.12345, "val_loss": 0.2})
    text = screen(monkeypatch)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    row = next(line for line in text.splitlines() if job_id in line)
    assert "SUCCEEDED" in row and "$0.05" in row and "│ digits… │" in row
    assert job_id in screen(monkeypatch, 200) and "digits-cnn-with-a-rather-long-name" in screen(monkeypatch, 200)


def test_no_jobs_is_a_hint(capsys):
    st.show_jobs()
    out = capsys.readouterr().out
    assert out.startswith("no jobs yet: `dlrun plan JOB_FILE` says where a job would run") and "┏" not in out
