"""The watch loop of one attempt (orchestrator/runs/watch.py) against a fake Jobs API, a fake provider
and a fake clock: status polling, the log tail and its metric/result lines, the budget guard,
node-state polling, an unreachable head, Ctrl-C.

The fake clock moves only when the Jobs API is polled (dt seconds a poll), so poll i (0-based) of
the loop sees now = T0 + i*dt; with price 3.6 $/h a second costs $0.001.
"""
from __future__ import annotations

import pytest

from infra.base import NodeState
from orchestrator.cost import usd
from tests.support.fakes_runs import FakeBackend, RawLogJobs, Up, metric, result
from tests.support.watch import Harness, T0


# --- status, logs and metrics -------------------------------------------------------------------------

def test_metric_lines_update_the_view_and_events(tmp_path):
    log = tmp_path / "job.log"
    h = Harness([
        "PENDING",
        ("RUNNING", "Loading data\n" + metric(epoch=1, epochs=3, loss=1.2, accuracy=0.4, samples_per_s=100.0)),
        ("RUNNING", "(worker pid=42) " + metric(epoch=2, epochs=3, loss=0.8, accuracy=0.6)),
        ("RUNNING", metric(event="resumed", epoch=2)),
        ("RUNNING", "DLRUN_METRIC {not json\n" + 'DLRUN_METRIC [1, 2]'),
        ("SUCCEEDED", metric(epoch=3, epochs=3, loss=0.5, accuracy=0.9) + "\n" + result(accuracy=0.91, f1=0.9)
         + "\ndone"),
    ], log_path=log)

    out = h.run()

    assert out.kind == "SUCCEEDED" and out.result == {"accuracy": 0.91, "f1": 0.9}
    assert out.run_seconds == pytest.approx(40.0)  # RUNNING at poll 2, SUCCEEDED at poll 6 (10 s apart)
    assert h.watcher.result == out.result
    v = h.view
    assert (v.epoch, v.epochs, v.loss, v.accuracy, v.phase) == (3, 3, 0.5, 0.9, "running")
    assert v.samples_per_s == 100.0  # kept from the last line that had it
    assert [d["epoch"] for d in h.of_kind("epoch")] == [1, 2, 3]
    assert h.of_kind("epoch")[1] == {"epoch": 2, "epochs": 3, "loss": 0.8, "accuracy": 0.6}
    assert h.of_kind("resumed") == [{"event": "resumed", "epoch": 2}]
    assert "resuming w from epoch 2 (--fresh to start over)" in h.display.messages
    assert [d["status"] for d in h.of_kind("ray_status")] == ["PENDING", "RUNNING", "SUCCEEDED"]  # on change
    # everything that is not a metric/result line goes to the display, once and in order
    assert h.display.logs == ["Loading data", "DLRUN_METRIC {not json", "DLRUN_METRIC [1, 2]", "done"]
    assert log.read_text() == h.jobs.text  # the whole log, each byte once
    # followed with one tail, each character read once, never the whole log again
    assert h.jobs.tails == 1 and h.jobs.chars_read == len(h.jobs.text) and h.jobs.logs_calls == 0
    # status polls every 0.1 s for the first 10 s of the fake clock, then slower, up to poll_s (0.5) at 60 s
    assert h.jobs.polls == 6 and h.sleeps == pytest.approx([0.1, 0.1, 0.18, 0.26, 0.34])


def test_log_errors_lose_nothing(tmp_path):
    log = tmp_path / "job.log"

    def on_status(jobs, poll):
        if poll == 2:
            jobs.logs_error = RuntimeError("dashboard 503")
        if poll == 4:
            jobs.logs_error = None

    h = Harness([("RUNNING", "first run\nline two"), ("RUNNING", "three"), ("RUNNING", "four"), "RUNNING",
                 "SUCCEEDED"], log_path=log, on_status=on_status)

    assert h.run().kind == "SUCCEEDED"
    assert h.display.logs == ["first run", "line two", "three", "four"]
    assert log.read_text() == "first run\nline two\nthree\nfour\n"


def test_ray_own_lines_stay_in_the_log_file_and_out_of_the_display(tmp_path):
    log = tmp_path / "job.log"
    ray_lines = ("2026-11-23 15:55:27,074\tINFO job_manager.py:581 -- Runtime env is setting up.\n"
                 "Running entrypoint for job dlrun-j-1-1: python -c \"print('hello')\"\n")
    h = Harness([("RUNNING", ray_lines + "hello"), "SUCCEEDED"], log_path=log)

    h.run()

    assert h.display.logs == ["hello"]
    assert log.read_text() == ray_lines + "hello\n"


def test_the_log_is_followed_from_when_the_job_runs():
    h = Harness(["PENDING", "PENDING", ("RUNNING", "setting up\nhello"), "SUCCEEDED"])
    h.run()
    assert h.jobs.tails == 1 and h.jobs.tail_opened_at == 3  # not while Ray is still starting the job
    assert h.display.logs == ["setting up", "hello"]


def test_the_end_is_polled_fast_once_the_result_arrived():
    h = Harness([("RUNNING", result(accuracy=0.5)), "RUNNING", "SUCCEEDED"], dt=100)
    assert h.run().result == {"accuracy": 0.5}
    assert h.sleeps == [0.05, 0.05]


def test_a_metric_line_split_across_polls_is_not_lost():
    line = metric(epoch=1, epochs=2, loss=0.7)
    h = Harness([("RUNNING", "start\n" + line[:20]), ("RUNNING", line[20:] + "\n"), "SUCCEEDED"],
                jobs_cls=RawLogJobs)

    h.run()

    assert h.of_kind("epoch") == [{"epoch": 1, "epochs": 2, "loss": 0.7}]
    assert h.display.logs == ["start"]


@pytest.mark.parametrize("final", ["FAILED", "STOPPED"])
def test_terminal_ray_statuses_end_the_watch(final):
    h = Harness(["RUNNING", ("RUNNING", "Traceback...\nValueError: boom"), final])
    out = h.run()
    assert out.kind == final and out.run_seconds == pytest.approx(20.0) and out.result == {}
    assert h.jobs.stopped == []  # an ended job is not stopped again
    assert h.display.logs[-1] == "ValueError: boom"


# Ray 2.60's message of an image_uri job on a node without podman (the lab's team cluster, abridged)
NO_PODMAN = """runtime_env setup failed: Failed to set up runtime environment.
Could not create the actor because its associated runtime env failed to be created.
[Node 10.77.0.4] Traceback (most recent call last):
  File "/opt/team-ray/venv/lib/python3.11/site-packages/ray/_private/runtime_env/image_uri.py", line 42, in _create_impl
    process = await asyncio.create_subprocess_exec(
FileNotFoundError: [Errno 2] No such file or directory: 'podman'
"""


def test_a_job_whose_runtime_env_failed_ends_with_ray_s_reason_in_one_line():
    h = Harness(["PENDING", "FAILED"])
    h.jobs.message = NO_PODMAN  # and no exit code: the driver never ran
    out = h.run()
    assert out.kind == "FAILED" and out.exit_code is None
    assert out.detail == ("runtime_env setup failed on node 10.77.0.4: "
                          "FileNotFoundError: [Errno 2] No such file or directory: 'podman'")


def test_a_job_that_exited_keeps_its_exit_code_whatever_ray_s_message():
    h = Harness(["RUNNING", "FAILED"])
    h.jobs.exit_code, h.jobs.message = 3, "Job entrypoint command failed with exit code 3"
    assert h.run().detail == "the job exited with code 3"


def test_run_seconds_is_none_when_info_fails():
    h = Harness(["RUNNING", "SUCCEEDED"])
    h.jobs.info = lambda sid: (_ for _ in ()).throw(ConnectionError("gone"))
    assert h.run().run_seconds is None


# --- the budget guard ---------------------------------------------------------------------------------

def test_budget_warning_once_at_80_percent():
    # $0.10 a poll: 80 % of $0.99 (= $0.792) is passed at poll 8; it ends before 100 %
    h = Harness(["RUNNING"] * 9 + ["SUCCEEDED"], dt=100, max_cost=0.99)

    out = h.run()

    assert out.kind == "SUCCEEDED"
    (warning,) = h.of_kind("budget_warning")
    assert warning["accrued"] == pytest.approx(0.8) and warning["max_cost"] == 0.99
    assert [m for m in h.display.messages if "budget warning" in m] == ["budget warning: $0.80 of $0.99 spent (80 %)"]
    assert h.view.accrued == pytest.approx(0.9)


@pytest.mark.parametrize("previous, stop_poll, warn_at", [
    (0.0, 6, 0.5),   # $0.55 reached at poll 6 ($0.60); 80 % ($0.44) first passed at poll 5
    (0.5, 1, 0.5),   # an earlier attempt's $0.50 counts: warned at once, stopped one poll later
])
def test_budget_reached_ends_the_watch(previous, stop_poll, warn_at):
    h = Harness(["RUNNING"], dt=100, max_cost=0.55, previous=previous)

    out = h.run()

    accrued = previous + stop_poll * 0.1
    assert out.kind == "BUDGET_EXCEEDED"
    assert out.detail == f"accrued {usd(accrued)} reached max $0.55"
    assert h.jobs.polls == stop_poll + 1
    assert [w["accrued"] for w in h.of_kind("budget_warning")] == [pytest.approx(warn_at)]
    assert h.jobs.stopped == []  # stopping the Ray job is the attempt's part, before teardown


def test_no_budget_no_guard():
    h = Harness(["RUNNING"] * 50 + ["SUCCEEDED"], dt=3600)  # $3.60 a poll, no max_cost
    assert h.run().kind == "SUCCEEDED"
    assert h.of_kind("budget_warning") == []


# --- an unreachable head ---------------------------------------------------------------------------------

def test_ten_consecutive_status_errors_are_a_preemption():
    h = Harness(["RUNNING"] + [ConnectionError("connection refused")] * 10 + ["SUCCEEDED"])
    out = h.run()
    assert out.kind == "PREEMPTED" and out.detail == "head unreachable: connection refused"
    assert h.jobs.polls == 11


def test_fewer_status_errors_in_a_row_are_not():
    down = [ConnectionError("connection refused")] * 9
    h = Harness(["RUNNING", *down, "RUNNING", *down, "SUCCEEDED"])
    assert h.run().kind == "SUCCEEDED"
    assert h.jobs.polls == 21


# --- node states -------------------------------------------------------------------------------------

def cluster_of(aws: FakeBackend, behaviour: Up):
    from infra.base import ClusterRequest
    from infra.catalog import load_offers

    offer = next(o for o in load_offers() if o.cloud == "aws" and o.spot_price_per_hour is not None)
    request = ClusterRequest(cluster_id="c-1", job_id="j-1", offer=offer, spot=True, num_nodes=2)
    cluster = aws._cluster(request)
    aws.live[cluster.cluster_id] = cluster
    aws.launched.append(cluster.cluster_id)
    aws.behaviour[cluster.cluster_id] = behaviour
    return cluster


@pytest.mark.parametrize("lost", ["preempted", "gone", "terminated"])
def test_lost_nodes_are_a_preemption_seen_at_node_poll_intervals(lost):
    h = Harness(["RUNNING"], dt=10, node_poll_s=30)
    aws = FakeBackend("aws", clock=h.clock)
    cluster = cluster_of(aws, Up(preempt_after=3, lost_status=lost))
    h.watcher.node_states = lambda: aws.status(cluster)

    out = h.run()

    assert out.kind == "PREEMPTED" and out.detail == f"c-1-n0 {lost}, c-1-n1 {lost}"
    # polled at loop times T0+30, T0+60, T0+90 (each read after that poll's status call moved the clock)
    assert aws.status_calls["c-1"] == 3
    assert aws.status_times == [T0 + 40, T0 + 70, T0 + 100]
    assert h.jobs.polls == 10


def test_pending_nodes_are_not_lost():
    h = Harness(["RUNNING"] * 8 + ["SUCCEEDED"], dt=10, node_poll_s=30)
    aws = FakeBackend("aws", clock=h.clock)
    cluster = cluster_of(aws, Up(preempt_after=1, lost_status="pending"))
    h.watcher.node_states = lambda: aws.status(cluster)
    assert h.run().kind == "SUCCEEDED" and aws.status_calls["c-1"] == 2


def test_provider_api_errors_are_not_preemptions():
    h = Harness(["RUNNING"] * 13 + ["SUCCEEDED"], dt=10, node_poll_s=30)
    aws = FakeBackend("aws", clock=h.clock)
    cluster = cluster_of(aws, Up(status_errors=(1, 2, 3)))
    h.watcher.node_states = lambda: aws.status(cluster)

    out = h.run()

    assert out.kind == "SUCCEEDED"
    assert aws.status_calls["c-1"] == 4
    assert [e["error"] for e in h.of_kind("provider_error")] == [f"aws API unavailable (call {i})" for i in (1, 2, 3)]


def test_without_node_states_nothing_is_polled():
    h = Harness(["RUNNING"] * 5 + ["SUCCEEDED"], dt=100, node_poll_s=1)
    assert h.run().kind == "SUCCEEDED"
    assert h.of_kind("provider_error") == []


# --- Ctrl-C ------------------------------------------------------------------------------------------------

def test_ctrl_c_confirmed_stops_the_job():
    h = Harness(["RUNNING", "RUNNING", KeyboardInterrupt(), "RUNNING"], cancel=True)

    out = h.run()

    assert out.kind == "STOPPED" and out.detail == "cancelled with Ctrl-C"
    assert h.jobs.stopped == ["sub-1"] and h.display.cancel_asked == 1
    assert h.of_kind("cancel_requested") == [{"by": "Ctrl-C"}]


def test_ctrl_c_declined_keeps_watching():
    h = Harness(["RUNNING", KeyboardInterrupt(), "RUNNING", ("SUCCEEDED", result(accuracy=0.5))], cancel=False)

    out = h.run()

    assert out.kind == "SUCCEEDED" and out.result == {"accuracy": 0.5}
    assert h.jobs.stopped == [] and h.display.cancel_asked == 1
    assert h.of_kind("cancel_requested") == []


def test_a_blip_with_the_nodes_still_running_is_not_a_preemption():
    """Where the cloud can be asked, failed polls end the attempt only when it says a node is gone."""
    running = [NodeState("n0", "running")]
    down = [ConnectionError("connection refused")] * 25  # longer than one check, shorter than HEAD_LOST_AFTER_S
    h = Harness(["RUNNING", *down, "SUCCEEDED"], node_states=lambda: running, dt=1.0)
    assert h.run().kind == "SUCCEEDED"
    assert len(h.of_kind("head_unreachable")) == 2


def test_failed_polls_and_a_node_the_cloud_says_is_gone_are_a_preemption():
    states = [NodeState("n0", "preempted", "spot reclaimed")]
    h = Harness(["RUNNING", *[ConnectionError("connection refused")] * 10, "SUCCEEDED"],
                node_states=lambda: states, dt=1.0)
    out = h.run()
    assert out.kind == "PREEMPTED" and "n0 preempted" in out.detail


def test_a_head_unreachable_for_ten_minutes_while_its_nodes_run_is_lost():
    running = [NodeState("n0", "running")]
    h = Harness(["RUNNING", *[ConnectionError("connection refused")] * 80, "SUCCEEDED"],
                node_states=lambda: running, dt=10.0)
    out = h.run()
    assert out.kind == "PREEMPTED" and "while its instances run" in out.detail
