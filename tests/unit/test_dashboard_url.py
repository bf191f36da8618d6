"""`dlrun dashboard JOB --url`: the plain URL of the job's page, printed at once (no one-use login link to wait
for), for scripts; the job is read from the store as dlrun's lifecycle wrote it."""
from orchestrator.cli import report as cli_report
from orchestrator.state.db import default_store
from tests.support.cli import invoke
from tests.support.store_records import running_local_job


def test_url_prints_and_exits():
    job_id = running_local_job(default_store(), supervisor_pid=None, ray_address="http://127.0.0.1:8265")
    code, result = invoke(cli_report.dashboard, [job_id, "--url"])
    assert code == 0, result.output
    assert result.stdout == f"http://127.0.0.1:8265/#/jobs/dlrun-{job_id}-1\n"
