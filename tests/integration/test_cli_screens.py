"""What dlrun's commands print, as `dlrun` prints it (orchestrator.cli.main.main, stdout and stderr apart):
status and --json, logs and logs -f, catalog and job-file errors, cost-report, down and dashboard with a
Ray head dlrun did not start. No Ray, no cloud: the store and the job's log file are made here."""
from __future__ import annotations

import json
import re
import threading
import time

import pytest

from orchestrator.cli.main import main
from orchestrator.paths import job_log_path
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from tests.support.http import LocalHttpServer, QuietHandler

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")


def dlrun(capsys, *argv) -> tuple[int, str, str]:
    """Run `dlrun ARGV` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    try:
        main(list(argv))
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def make_job(status="SUCCEEDED", *, backend="aws", spot=0, metrics=None, detail="", log=None):
    store = default_store()
    job = store.create_job(name="digits", spec_hash="h", spec_json="{}", max_cost=5.0, est_cost=0.5)
    cluster = f"c-{job}"
    store.cluster_launching(cluster, provider=backend, job_id=job, region="us-east-1" if backend == "aws" else "local",
                            instance_type="g4dn.xlarge", spot=bool(spot), num_nodes=1, price_per_hour=0.526,
                            launched_at=time.time())
    store.cluster_terminated(cluster)
    store.start_attempt(job, attempt=1, backend=backend, offer_key=f"{backend}/x", instance_type="g4dn.xlarge"
                        if backend == "aws" else "cpu", accelerator="T4" if backend == "aws" else "CPU",
                        accelerator_count=1 if backend == "aws" else 0, spot=bool(spot), price_per_hour=0.526,
                        price_date=None, cluster_id=cluster)
    store.mark_submitted(job, f"dlrun-{job}-1", "")
    store.set_actual_cost(job, 0.0123)
    if metrics:
        store.set_metrics(job, metrics)
    store.set_status(job, JobStatus.RUNNING)
    if status != "RUNNING":
        store.finish(job, JobStatus(status), detail, actual_seconds=12.5)
    if log is not None:
        job_log_path(job).write_text(log)
    return job


# --- status ---------------------------------------------------------------------------------------------

def test_status_of_a_job_reads_as_words(capsys):
    job = make_job(metrics={"accuracy": 0.9722, "loss": 0.0911, "device": "cpu"})

    code, out, _ = dlrun(capsys, "status", job)

    assert code == 0
    assert re.search(r"backend: aws us-east-1 g4dn\.xlarge T4$", out, re.M)
    assert re.search(r"spot: no$", out, re.M) and "spot: 0" not in out
    assert re.search(r"reported: accuracy=0\.9722 loss=0\.0911$", out, re.M)
    assert "{" not in out.split("history:")[0]  # no Python dict
    assert re.search(r"cost: \$0\.01$", out, re.M) and re.search(r"ran: 12 s$", out, re.M)


def test_status_json_has_iso_times_nulls_and_booleans(capsys):
    job = make_job(spot=1, metrics={"accuracy": 0.5})

    code, out, _ = dlrun(capsys, "status", job, "--json")
    one = json.loads(out)
    _, listing, _ = dlrun(capsys, "status", "--json")

    assert code == 0
    assert ISO.match(one["created_at"]) and ISO.match(one["started_at"]) and ISO.match(one["ended_at"])
    assert one["spot"] is True and one["schedule_id"] is None and one["metrics"] == {"accuracy": 0.5}
    assert all(ISO.match(e["ts"]) for e in one["events"])
    plan_less = [e for e in one["events"] if e["kind"] == "status" and e["status"] == "PENDING"][0]
    assert plan_less["detail"] is None  # no empty strings for "nothing"
    (row,) = json.loads(listing)
    assert row["id"] == job and ISO.match(row["created_at"]) and row["spot"] is True


def test_cost_report_counts_in_words(capsys):
    make_job()
    code, out, _ = dlrun(capsys, "cost-report")
    assert code == 0 and "1 job" in out and "1 jobs" not in out


# --- logs -----------------------------------------------------------------------------------------------

LOG = ("2026-11-23 15:55:27,074\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
       "loading data\n"
       'DLRUN_METRIC {"epoch":1,"epochs":2,"loss":0.9,"train_acc":0.5}\n'
       '(RayTrainWorker pid=42) DLRUN_METRIC {"event":"resumed","epoch":1}\n'
       'DLRUN_RESULT {"train_acc":0.93,"loss":0.2}\n'
       "Traceback (most recent call last):\n")


def test_logs_render_progress_lines(capsys):
    job = make_job("FAILED", detail="the job exited with code 3", log=LOG)

    code, out, err = dlrun(capsys, "logs", job)

    assert code == 0
    assert out.splitlines() == ["loading data", "epoch 1/2  loss=0.9 train_acc=0.5",
                                "(RayTrainWorker pid=42) resumed from checkpoint at epoch 1",
                                "result: train_acc=0.93 loss=0.2", "Traceback (most recent call last):"]
    assert dlrun(capsys, "logs", job, "--raw")[1] == LOG


def test_logs_follow_of_a_failed_job_ends_with_its_status_and_exit_code(capsys):
    job = make_job("FAILED", backend="local", detail="the job exited with code 3", log=LOG)

    code, out, err = dlrun(capsys, "logs", job, "-f")

    assert code == 1  # dlrun's code for a failed job
    assert "result: train_acc=0.93" in out
    assert err.strip() == f"{job} FAILED on local CPU after 12 s, $0.01 (the job exited with code 3)"


def test_logs_follow_prints_lines_as_they_come_until_the_job_ends(capsys):
    from orchestrator.cli.status import print_logs

    job = make_job("RUNNING", backend="local", log="first\n")

    def job_goes_on():
        path = job_log_path(job)
        for text in ('DLRUN_METRIC {"epoch":2,"epochs":2', ',"loss":0.4}\nsecond\n'):  # a line written in two
            time.sleep(0.2)
            with open(path, "a") as f:
                f.write(text)
        time.sleep(0.2)
        default_store().finish(job, JobStatus.SUCCEEDED, "", actual_seconds=3.0)

    writer = threading.Thread(target=job_goes_on)
    writer.start()
    code = print_logs(job, follow=True, poll_s=0.05)
    writer.join()
    out = capsys.readouterr()

    assert code == 0
    assert out.out.splitlines() == ["first", "epoch 2/2  loss=0.4", "second"]
    assert out.err.startswith(f"{job} SUCCEEDED on local CPU in 3.0 s")


# --- input errors -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--region", "mars-1"], "--region: no region 'mars-1' in the catalog"),
    (["--region", "us-est-1"], "did you mean us-east-1"),
    (["--cloud", "aws", "--region", "us-central1"], "'us-central1' is a gcp region, not aws's"),
    (["--gpu", "T5"], "--gpu: unknown GPU 'T5'; did you mean T4"),
])
def test_catalog_rejects_unknown_regions_and_gpus(capsys, args, message):
    code, out, err = dlrun(capsys, "catalog", *args)
    assert code == 2 and out == ""
    assert err.startswith("dlrun: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_catalog_says_where_a_known_gpu_is_offered_when_the_filters_exclude_it(capsys):
    code, out, err = dlrun(capsys, "catalog", "--gpu", "T4", "--region", "us-east-2")
    assert code == 0 and err.startswith("no catalog offer has GPU T4, region us-east-2; T4 is offered in: ")
    assert "aws us-east-1" in err and "us-east-2" not in err.split("offered in:")[1]


@pytest.mark.parametrize("text, message", [
    ("nmae: x\njob: cnn\n", ":1: unknown field 'nmae'; did you mean 'name'?"),
    ("name: x\njob: cnn\nworkload:\n  modle: jobs.cnn:SimpleCNN\n  input_shape: [1, 8, 8]\n  batch_size: 8\n"
     "  dataset_size: 64\n  epochs: 1\n", ":4: unknown field 'workload.modle'; did you mean 'model'?"),
])
def test_a_typo_in_a_required_field_gets_its_did_you_mean(capsys, tmp_path, text, message):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    code, out, err = dlrun(capsys, "plan", str(path))
    assert code == 2 and err.strip() == f"dlrun: error: {path}{message}"


# --- schedules --------------------------------------------------------------------------------------------

def test_schedule_list_json_uses_iso_times_and_null(capsys, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: nightly\njob: cnn\nresources:\n  clouds: [local]\n")

    code, out, err = dlrun(capsys, "schedule", "add", str(job), "--cron", "0 2 * * *", "--tz", "Europe/Madrid")
    assert code == 0 and "`dlrun scheduler` is running" in err  # nothing fires without one
    (row,) = json.loads(dlrun(capsys, "schedule", "list", "--json")[1])
    assert re.match(r"^\d{4}-\d\d-\d\dT02:00:00\+0[12]:00$", row["next_run"])
    assert row["last_run"] is None and row["last_result"] is None and row["last_job_id"] is None
    assert row["paused"] is False

    dlrun(capsys, "schedule", "pause", "nightly")
    (row,) = json.loads(dlrun(capsys, "schedule", "list", "--json")[1])
    assert row["paused"] is True and row["next_run"] is None


# --- down and dashboard with a head dlrun did not start -------------------------------------------------------

@pytest.fixture
def foreign_head(monkeypatch):
    """An HTTP server that answers like a Ray dashboard (/api/version): a head someone else started."""
    class Handler(QuietHandler):
        def do_GET(self):
            self.reply(200, json.dumps({"ray_version": "2.60.0", "version": "2"}).encode(), "application/json")

    server = LocalHttpServer(Handler).start()
    monkeypatch.setenv("DLRUN_DASHBOARD_PORT", str(server.port))
    monkeypatch.delenv("DLRUN_RAY_ADDRESS", raising=False)
    yield server.endpoint
    server.stop()


def test_down_and_dashboard_tell_the_truth_about_a_head_dlrun_attached_to(capsys, foreign_head):
    code, out, _ = dlrun(capsys, "down")
    assert code == 0
    assert out.strip() == (f"nothing to stop: the Ray head at {foreign_head} was not started by dlrun (dlrun only "
                           "attached to it for local jobs); stop it where it was started")
    code, out, err = dlrun(capsys, "dashboard")
    assert code == 0 and out.strip() == foreign_head and "a Ray head dlrun did not start" in err


def test_down_and_dashboard_without_any_head(capsys, monkeypatch):
    from infra.reach import free_port

    monkeypatch.setenv("DLRUN_DASHBOARD_PORT", str(free_port()))
    monkeypatch.delenv("DLRUN_RAY_ADDRESS", raising=False)
    code, out, _ = dlrun(capsys, "down")
    assert code == 0 and out.startswith("nothing to stop: no local Ray head dlrun started is running")
    code, out, err = dlrun(capsys, "dashboard")
    assert code == 2 and err.startswith("dlrun: error: no Ray dashboard is up")


def test_dashboard_of_a_job_shows_its_page_or_says_why_there_is_none(capsys):
    code, out, err = dlrun(capsys, "dashboard", "j-nosuch")
    assert code == 2 and err.strip() == "dlrun: error: no job 'j-nosuch'; `dlrun status` lists them"
    gone = make_job(backend="aws")  # its cluster is terminated: no tunnel to open
    code, out, err = dlrun(capsys, "dashboard", gone)
    assert code == 2 and err.strip() == f"dlrun: error: job {gone}'s cluster is gone; its record: `dlrun status {gone}`"
    local = make_job(backend="local")
    default_store().set_ray_address(local, "http://127.0.0.1:8299")
    code, out, err = dlrun(capsys, "dashboard", local, "--no-login")
    assert code == 0 and out.strip() == f"http://127.0.0.1:8299/#/jobs/dlrun-{local}-1"


# --- Ctrl-C outside the watch (while launching, say) ----------------------------------------------------------

def test_an_interrupted_submit_says_what_it_cancelled(capsys, tmp_path, monkeypatch):
    import os

    from orchestrator.runs import executor

    job = tmp_path / "job.yaml"
    job.write_text("name: quick\nrun: python -c pass\nreference: {accelerator: cpu, hours: 0.01}\n"
                   "resources:\n  clouds: [local]\n")

    def interrupted(spec, **kw):  # as execute leaves it: the job recorded CANCELLED, time kept, then re-raised
        store = default_store()
        job_id = store.create_job(name=spec.name, spec_hash="h", spec_json="{}", supervisor_pid=os.getpid())
        store.cluster_launching(f"c-{job_id}", provider="local", job_id=job_id, region=None, instance_type="cpu",
                                spot=False, num_nodes=1, price_per_hour=0.0, launched_at=time.time())
        store.cluster_terminated(f"c-{job_id}")
        store.start_attempt(job_id, attempt=1, backend="local", offer_key="local/cpu", instance_type="cpu",
                            accelerator="CPU", accelerator_count=0, spot=False, price_per_hour=0.0, price_date=None,
                            cluster_id=f"c-{job_id}")
        store.cancel(job_id, "interrupted with Ctrl-C", actual_seconds=2.0)
        raise KeyboardInterrupt

    monkeypatch.setattr(executor, "submit", interrupted)
    code, out, err = dlrun(capsys, "submit", str(job), "--backend", "local")

    assert code == 130 and out == ""
    choice, line = [x for x in err.splitlines() if x]  # the line submit prints before it starts, then the outcome
    assert choice.startswith("running on local CPU: est. ")
    assert re.fullmatch(r"dlrun: interrupted: j-\S+ CANCELLED on local CPU after 2\.0 s, \$0 \(interrupted "
                        r"with Ctrl-C\): nothing is left running \(the local Ray head stays up for its dashboard; "
                        r"`dlrun down` stops it\)", line), line


def test_the_first_plan_of_a_workload_says_it_is_profiling_the_model(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    job = tmp_path / "job.yaml"
    job.write_text("name: tiny\njob: cnn\nresources:\n  clouds: [local]\nworkload:\n"
                   "  model: tests.support.models:TinyCNN\n  input_shape: [1, 8, 8]\n  batch_size: 32\n"
                   "  dataset_size: 320\n  epochs: 2\n")
    first = dlrun(capsys, "plan", str(job), "--json")
    again = dlrun(capsys, "plan", str(job), "--json")
    assert first[0] == 0 and json.loads(first[1])["chosen"]
    assert first[2] == "[dlrun] profiling TinyCNN on this CPU… (once: the next plan reuses it)\n"
    assert again[2] == ""  # measured once, then reused
