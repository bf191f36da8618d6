"""`dlrun catalog` and `dlrun cost-report` on a terminal 80 columns wide: no cell wraps, money and ids stay
whole, free text is cut with '…', the columns left out are named; the catalog marks retired offers (†) and
says how old its prices are."""
import io

from rich.console import Console

from orchestrator.cli import plan as cli_plan
from orchestrator.cli import report as cli_report
from orchestrator.cli.render import summary
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from tests.support.cli import invoke


def terminal(monkeypatch, module, attr, width=80) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(module, attr, lambda: Console(width=width, file=out))
    return out


def test_catalog_of_a_retired_gpu(monkeypatch):
    table = terminal(monkeypatch, cli_plan, "_console")
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "K80"])
    assert code == 0, result.output
    text = table.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "† p2.xlarge" in text and "1×K80" in text and " 0.9000 " in text and "2022-06-01" in text
    assert "† retired: AWS p2 (K80) retired on" in result.output
    assert "prices dated 2022-06-01, the oldest" in result.output and "years old" in result.output
    assert "left out at this width: " in result.output


def test_cost_report(monkeypatch):
    store = default_store()
    job_id = store.create_job(name="digits-cnn-with-a-long-name", spec_hash="h", spec_json="{}", est_cost=0.3)
    store.start_attempt(job_id, attempt=1, backend="aws", offer_key="aws/us-east-1/g4dn.xlarge",
                        instance_type="g4dn.xlarge", accelerator="T4", accelerator_count=1, spot=True,
                        price_per_hour=0.36, price_date="2026-11-01", cluster_id="c-aws")
    store.set_status(job_id, JobStatus.RUNNING)
    store.set_actual_cost(job_id, 0.05)
    store.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=3600.0)
    table = terminal(monkeypatch, summary, "console")
    code, result = invoke(cli_report.cost_report, [])
    assert code == 0, result.output
    text = table.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    row = next(line for line in text.splitlines() if job_id in line)
    assert "$0.05" in row and "$0.30" in row
    assert "left out at this width: " in result.output


def test_an_empty_cost_report_is_a_hint():
    code, result = invoke(cli_report.cost_report, [])
    assert code == 0 and result.stdout.startswith("no jobs yet, nothing spent: `dlrun plan JOB_FILE`")
