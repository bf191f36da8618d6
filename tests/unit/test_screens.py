"""What the live display and the result line say (rich's recording console, a fake terminal), and what
Ctrl-C leaves on the screen and in the record, through the run loop with fakes at the boundaries."""
from __future__ import annotations

import io
import json

import pytest

from orchestrator.cli.render.display import JobView, PlainDisplay, RichDisplay, profiling_notice
from orchestrator.cli.render.summary import backend_name, result_line
from orchestrator.cost import usd
from tests.support.fakes_runs import FakeBackend, JobsFactory, RecordingDisplay, metric
from tests.support.run_loop import new_job, run, statuses


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("args, name", [
    (("local", "local", "cpu", None, 0, False), "local CPU"),
    (("local", "local", "gpu", "A100", 2, False), "local 2×A100"),
    (("aws", "us-east-1", "g4dn.xlarge", "T4", 1, True), "aws us-east-1 g4dn.xlarge T4 spot"),
    (("gcp", "us-central1", "n2-standard-4", None, 0, False), "gcp us-central1 n2-standard-4 CPU"),
])
def test_backends_are_named_as_people_say_them(args, name):
    assert backend_name(*args) == name


def test_the_live_panel_shows_the_job_metrics_under_the_names_it_reported():
    stream = io.StringIO()
    d = RichDisplay(stream)
    view = JobView(job_id="j-1", name="mine", phase="running", backend="local CPU", epoch=2, epochs=4,
                   metrics={"train_acc": 0.91234, "loss": 0.25})
    d.update(view)
    d.log("[worker 3] step 10")  # a log line is text, not rich markup
    d.close()
    shown = stream.getvalue()
    assert "train_acc 0.9123" in shown and "loss 0.25" in shown
    assert "accuracy" not in shown and "held-out" not in shown
    assert "running on local CPU" in shown and "[worker 3] step 10" in shown


def test_plain_lines_say_each_phase_once_and_leave_the_end_to_the_result_line():
    stream = io.StringIO()
    d = PlainDisplay(stream)
    view = JobView(job_id="j-1", backend="local CPU")
    for phase in ("provisioning", "running", "running", "tearing down", "succeeded"):
        view.phase = phase
        d.update(view)
    view.epoch, view.epochs, view.metrics = 1, 2, {"val_f1": 0.5}
    d.update(view)
    lines = [ln.split(" (")[0] for ln in stream.getvalue().splitlines()]
    assert lines == ["[dlrun] j-1 provisioning on local CPU", "[dlrun] j-1 running on local CPU",
                     "[dlrun] j-1 tearing down on local CPU", "[dlrun] epoch 1/2 val_f1=0.5 $0"]


def test_profiling_is_announced_with_a_spinner_on_a_terminal_and_one_line_otherwise():
    tty, pipe = Terminal(), io.StringIO()
    with profiling_notice("SimpleCNN", tty):
        pass
    with profiling_notice("SimpleCNN", pipe):
        pass
    assert "profiling SimpleCNN on this CPU…" in tty.getvalue() and "\x1b[" in tty.getvalue()  # drawn
    assert pipe.getvalue() == "[dlrun] profiling SimpleCNN on this CPU… (once: the next plan reuses it)\n"


# --- Ctrl-C --------------------------------------------------------------------------------------------

def test_ctrl_c_while_watching_says_what_was_stopped_and_keeps_time_and_cost(store, clock):
    spec, plan, job_id = new_job(store)
    aws = FakeBackend("aws", clock=clock, launch_seconds=60)
    jobs = JobsFactory(clock, [("RUNNING", metric(epoch=1, epochs=9, loss=1.0)), KeyboardInterrupt()], dt=60)

    res = run(job_id, store, plan, [aws], jobs, clock, display=RecordingDisplay(cancel=True))

    row = store.get_job(job_id)
    assert (res.status, res.exit_code) == ("CANCELLED", 130)
    assert statuses(store, job_id)[-1] == "CANCELLED"
    assert row.actual_seconds > 0 and row.actual_cost > 0  # launch + two polls of node time
    assert jobs.clients[0].stopped == [f"dlrun-{job_id}-1"]
    (cluster,) = aws.launched
    line = result_line(store, job_id)
    assert line.startswith(f"{job_id} CANCELLED on aws ")
    assert line.endswith(f"{usd(row.actual_cost)} (cancelled with Ctrl-C): Ray job dlrun-{job_id}-1 stopped; "
                         f"cluster {cluster} terminated; nothing is left running")


def test_ctrl_c_while_launching_is_recorded_with_the_time_spent(store, clock):
    spec, plan, job_id = new_job(store)
    aws = FakeBackend("aws", [KeyboardInterrupt()], clock=clock)

    with pytest.raises(KeyboardInterrupt):
        run(job_id, store, plan, [aws], JobsFactory(clock, ["RUNNING"]), clock)

    row = store.get_job(job_id)
    assert row.status == "CANCELLED" and row.actual_seconds is not None
    assert "(interrupted with Ctrl-C)" in result_line(store, job_id)
    assert json.loads(row.spec_json)["name"] == spec.name
