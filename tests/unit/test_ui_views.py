"""What `dlrun ui`'s pages are made of, read from a real store: the plan each job keeps (every candidate,
the frontier), the curves from its kept log, the jobs' filters and pages, schedules and cost."""
from __future__ import annotations

import json

from orchestrator.paths import job_log_path
from orchestrator.state.db import Store
from orchestrator.state.job_pages import LIVE_FILTER, JobFilter, job_page
from orchestrator.states import JobStatus
from orchestrator.ui import views
from tests.support.ui_seed import CANDIDATES, HOSTILE, metric_line, pending_job, seed_pages


def test_submit_keeps_every_candidate_of_the_plan_with_the_job(tmp_path, monkeypatch):
    import yaml

    from orchestrator.planning.spec import load_job
    from orchestrator.runs.executor import make_plan, record_job

    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": {
        "model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32, "dataset_size": 320,
        "epochs": 2}}))
    spec = load_job(path)
    store = Store()
    plan = make_plan(spec, store=store)
    job = store.get_job(record_job(spec, plan, store=store))
    shown = views.plan_view(store, job)
    assert shown["complete"] and len(shown["points"]) == len(plan.candidates)
    chosen = [p for p in shown["points"] if p["chosen"]]
    assert [p["offer"] for p in chosen] == [plan.chosen.offer.label + (" spot" if plan.chosen.spot else "")]
    assert all(p["why"] for p in shown["points"] if not p["feasible"])
    assert all(shown["points"][i]["feasible"] for i in shown["frontier"])


def test_the_frontier_is_the_cheapest_for_each_deadline():
    store = Store()
    job = store.get_job(pending_job(store))
    shown = views.plan_view(store, job)
    # fastest feasible first: T4 on demand (0.05 h, $0.04), then T4 spot (0.06, $0.015), then local (0.2, $0);
    # the V100 is beaten on both and the A100, excluded, is not on it
    assert [shown["points"][i]["offer"] for i in shown["frontier"]] == [
        "aws us-east-1 g4dn.xlarge T4", "aws us-east-1 g4dn.xlarge T4 spot", "local CPU"]
    assert shown["points"] == CANDIDATES


def test_a_job_recorded_before_the_candidates_were_kept_shows_its_chosen_one():
    store = Store()
    job_id = store.create_job(name="old", spec_hash="h", spec_json="{}")
    store.add_event(job_id, "plan", {"chosen": "local CPU", "est_hours": 0.5, "est_cost": 0.0, "unusable": []})
    shown = views.plan_view(store, store.get_job(job_id))
    assert not shown["complete"]
    assert [(p["offer"], p["hours"], p["chosen"]) for p in shown["points"]] == [("local CPU", 0.5, True)]


def test_curves_are_every_number_reported_per_epoch_from_the_kept_log():
    store = Store()
    job_id = pending_job(store)
    job_log_path(job_id).write_text("\n".join([
        "starting",
        metric_line(event="resumed", epoch=1),  # an event, not an epoch's numbers
        "bar 10%\r" + metric_line(epoch=1, epochs=2, loss=0.9, accuracy=0.5, lr=0.1, progress=0.5),
        metric_line(epoch=2, epochs=2, loss=0.4, accuracy=0.8, lr=0.05, **{HOSTILE: 3}),
        'DLRUN_RESULT {"accuracy": 0.8}',
        "DLRUN_METRIC {not json",
    ]) + "\n")
    curves = views.Curves()
    series = {s["name"]: s["points"] for s in curves.of(job_id)["series"]}
    assert series == {"loss": [[1.0, 0.9], [2.0, 0.4]], "accuracy": [[1.0, 0.5], [2.0, 0.8]],
                      "lr": [[1.0, 0.1], [2.0, 0.05]], HOSTILE: [[2.0, 3.0]]}
    assert [s["name"] for s in curves.of(job_id)["series"]][:2] == ["loss", "accuracy"]
    with open(job_log_path(job_id), "a") as f:  # read again: only what was added since
        f.write(metric_line(epoch=3, epochs=3, loss=0.2) + "\n")
    assert [s["points"] for s in curves.of(job_id)["series"]][0] == [[1.0, 0.9], [2.0, 0.4], [3.0, 0.2]]


def test_the_log_is_read_in_whole_lines_from_where_the_page_left_it():
    store = Store()
    job_id = pending_job(store)
    path = job_log_path(job_id)
    path.write_text("one\ntwo\nhalf")
    first = views.log_view(job_id, -1)
    assert first["lines"] == ["one", "two"]
    with open(path, "a") as f:
        f.write(" done\nthree\n")
    assert views.log_view(job_id, first["offset"])["lines"] == ["half done", "three"]
    assert views.log_view("j-none", -1) == {"lines": [], "offset": 0}


def test_jobs_are_paged_newest_first_and_filtered():
    store = Store()
    seeded = seed_pages(store, nights=3)
    waiting = pending_job(store)
    jobs, total = job_page(store, JobFilter(), offset=0, limit=2)
    assert total == 6 and [j.id for j in jobs] == [waiting, seeded.hostile]
    jobs, total = job_page(store, JobFilter(), offset=4, limit=2)
    assert [j.id for j in jobs] == [seeded.jobs[1], seeded.jobs[0]]
    assert [j.id for j in job_page(store, JobFilter(status=LIVE_FILTER))[0]] == [waiting]
    assert job_page(store, JobFilter(status="SUCCEEDED", schedule=seeded.schedule_id))[1] == 3
    assert job_page(store, JobFilter(name="<script>"))[0][0].id == seeded.hostile
    assert job_page(store, JobFilter(name=waiting[:8]))[1] >= 1  # a part of the id finds it too


def test_schedules_list_each_night_with_its_cost_against_the_estimate():
    store = Store()
    seeded = seed_pages(store, nights=3)
    (sched,) = views.schedules_view(store)
    assert sched["name"] == seeded.schedule and sched["next_run"]
    assert [(r["job"], r["cost"], r["est_cost"]) for r in sched["runs"]] == [
        (seeded.jobs[0], 0.01, 0.02), (seeded.jobs[1], 0.02, 0.02), (seeded.jobs[2], 0.03, 0.02)]
    assert sched["runs"][2]["hours"] == (600 + 120) / 3600


def test_cost_per_day_and_backend_estimated_against_actual():
    store = Store()
    seed_pages(store, nights=2)  # local: 0.01 + 0.02 (est 0.02 each) and the hostile one; aws: 0.05 (est 0.04)
    cost = views.cost_view(store)
    backends = {b["key"]: b for b in cost["backends"]}
    assert round(backends["local"]["actual_cost"], 6) == 0.03 and round(backends["local"]["est_cost"], 6) == 0.04
    assert round(backends["aws"]["actual_cost"], 6) == 0.05 and backends["aws"]["jobs"] == 1
    (day,) = cost["days"]
    assert day["jobs"] == 4 and round(day["actual_cost"], 6) == 0.08
    json.dumps(cost)  # what the page embeds


def test_a_job_view_holds_its_status_history_and_its_cluster_state():
    store = Store()
    seeded = seed_pages(store, nights=1)
    view = views.job_view(store, store.get_job(seeded.jobs[0]), views.Curves())
    statuses = [e["status"] for e in view["events"] if e["kind"] == "status"]
    assert statuses == ["PENDING", "PROVISIONING", "RUNNING", "SUCCEEDED"]
    (plan,) = [e["detail"] for e in view["events"] if e["kind"] == "plan"]
    assert plan == "chosen=local CPU spot=False est_hours=0.2 est_cost=0.02 unusable= candidates=5"
    assert view["job"]["status"] == JobStatus.SUCCEEDED.value and view["dashboard"] is None
