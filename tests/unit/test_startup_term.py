"""Issue 17 item 5: the fixed start of a local job is measured once per machine, cached, counted in
the local estimate, and corrected by finished runs apart from the step time."""
import json
import shutil
import time
from dataclasses import asdict

import pytest

from orchestrator.planning import estimator, startup
from orchestrator.state.db import Store
from tests.unit.test_estimator import LOCAL_CPU, synthetic


def test_the_local_start_is_measured_once_then_read_from_dlrun_home(dlrun_home, monkeypatch):
    monkeypatch.setattr(startup, "_memo", {})
    first = startup.local_startup_seconds()
    cached = json.loads((dlrun_home / "profiles" / "local_startup.json").read_text())
    assert first > 0.2 and cached["seconds"] == pytest.approx(first, abs=1e-3) and "torch" in cached["probe"]
    # another process (a fresh memo) reads the file instead of measuring again
    (dlrun_home / "profiles" / "local_startup.json").write_text(json.dumps({**cached, "seconds": 3.21}))
    monkeypatch.setattr(startup, "_memo", {})
    assert startup.local_startup_seconds() == 3.21
    e = estimator.estimate(synthetic(local={"cpu": 0.01}, steps=100), LOCAL_CPU, spot=False)
    assert e.start_seconds == pytest.approx(3.21 + estimator.JOB_START_SECONDS)
    assert e.run_seconds == pytest.approx(0.01 * 100 * (1 + estimator.EVAL_FRACTION) + e.start_seconds)


def _adopt(head, dlrun_home):
    """Make the session's head the one dlrun started from this $DLRUN_HOME (its record and token)."""
    from infra.auth import LOCAL, token_path

    (dlrun_home / "local_head.json").write_text(json.dumps(asdict(head)))
    shutil.copy(head.token_path, token_path(LOCAL))


def _probe_jobs(head):
    from orchestrator.runs.ray_jobs import RayJobs

    return [j for j in RayJobs(head.dashboard_url).list() if j.metadata.get("dlrun_probe")]


def test_with_no_head_up_the_start_is_the_import_timing_plus_the_ray_prior_and_nothing_starts(
        dlrun_home, monkeypatch):
    monkeypatch.setattr(startup, "_memo", {})
    t0 = time.perf_counter()
    data = startup.measure()
    assert data["basis"] == "imports + prior" and data["process_seconds"] > 0.2
    assert data["seconds"] == pytest.approx(data["process_seconds"] + startup.RAY_JOB_PRIOR_SECONDS, abs=1e-3)
    assert startup.ray_share_seconds() == pytest.approx(startup.RAY_JOB_PRIOR_SECONDS, abs=1e-3)
    assert not (dlrun_home / "local_head.json").exists()  # no head started for a plan
    assert time.perf_counter() - t0 < data["process_seconds"] + 5
    # a later process reads the file: no import timing again, still no head
    monkeypatch.setattr(startup, "_memo", {})
    monkeypatch.setattr(startup, "process_start_seconds", lambda: pytest.fail("measured again"))
    assert startup.local_startup_seconds() == pytest.approx(data["seconds"])


def test_a_running_dlrun_head_gets_one_no_op_job_timed_as_a_run_and_cached(ray_head, dlrun_home, monkeypatch):
    """First a plan with no head (prior), then dlrun's head is up: the next plan measures Ray's job start
    for real, once; the figure is Ray's own run time of the no-op job, as a run's is recorded."""
    monkeypatch.setattr(startup, "_memo", {})
    assert startup.measure()["basis"] == "imports + prior"
    before = len(_probe_jobs(ray_head))
    _adopt(ray_head, dlrun_home)
    monkeypatch.setattr(startup, "_memo", {})
    data = startup.measure()
    assert data["basis"] == "ray job"
    probes = _probe_jobs(ray_head)
    assert len(probes) == before + 1
    job = max(probes, key=lambda j: j.start_time)
    assert job.status == "SUCCEEDED" and job.entrypoint == startup.RAY_JOB_ENTRYPOINT
    assert data["seconds"] == pytest.approx((job.end_time - job.start_time) / 1000.0, abs=1e-3)
    # the job process inside it imported torch: at least as long as the same imports in a fresh process, less slack
    assert data["seconds"] >= 0.5 * data["process_seconds"]
    cached = json.loads((dlrun_home / "profiles" / "local_startup.json").read_text())
    assert cached["basis"] == "ray job" and cached["seconds"] == data["seconds"]
    # measured once per machine: later processes read it, the head is not asked again
    monkeypatch.setattr(startup, "_memo", {})
    assert startup.local_startup_seconds() == data["seconds"]
    assert len(_probe_jobs(ray_head)) == before + 1
    e = estimator.estimate(synthetic(local={"cpu": 0.01}, steps=100), LOCAL_CPU, spot=False)
    assert e.start_seconds == pytest.approx(data["seconds"] + estimator.JOB_START_SECONDS)


def test_a_probed_job_gets_only_rays_share_of_the_start_on_top_of_its_timed_run(dlrun_home, monkeypatch):
    """The job probe timed the job's process from its spawn (imports, data load): adding the whole
    start again would count the process start twice."""
    from orchestrator.planning.job_probe import ProbeResult
    from orchestrator.planning.planner import probed_profile

    (dlrun_home / "profiles").mkdir(exist_ok=True)
    (dlrun_home / "profiles" / "local_startup.json").write_text(json.dumps(
        {"key": startup._key(), "seconds": 7.5, "process_seconds": 3.0, "basis": "ray job"}))
    monkeypatch.setattr(startup, "_memo", {})
    prof = probed_profile(ProbeResult(run_seconds=12.0, probe_seconds=12.0, complete=True, points=[], threads=1))
    e = estimator.estimate(prof, LOCAL_CPU, spot=False)
    assert e.start_seconds == pytest.approx(4.5)
    assert e.run_seconds == pytest.approx(12.0 + 4.5, rel=1e-3)
    # elsewhere the probe's time is scaled and Ray's local start is not added
    cloud = next(o for o in __import__("infra.catalog", fromlist=["load_offers"]).load_offers()
                 if o.accelerator is None and o.cloud == "aws")
    assert estimator.estimate(prof, cloud, spot=False).start_seconds == 0.0


def _record(store, est, actual, start):
    jid = store.create_job(name="j", spec_hash="h", spec_json="{}", accelerator="cpu", model_family="conv",
                           est_run_seconds=est)
    store.add_event(jid, "plan", {"est_start_seconds": start})
    store.set_status(jid, "SUCCEEDED", actual_run_seconds=actual)


def test_finished_runs_correct_the_start_up_term_and_the_step_term_apart(dlrun_home, monkeypatch):
    """The truth: the start takes 2.5× its estimate, a step 1.1×. Small and large jobs alternate, each
    estimated with the store's history of its time, as the runner records them."""
    monkeypatch.setattr(startup, "_memo", {startup._key(): {"seconds": 4.0, "process_seconds": 3.0,
                                                            "basis": "ray job"}})
    store = Store()
    for steps in (50, 5000, 100, 2000, 80, 8000):
        p = synthetic(local={"cpu": 0.01}, steps=steps)
        est = estimator.estimate(p, LOCAL_CPU, spot=False, history=estimator.history_from_store(store))
        start = 4.0 + estimator.JOB_START_SECONDS
        truth = 2.5 * start + 1.1 * (est.raw_run_seconds - start)
        _record(store, est.run_seconds, truth, est.start_seconds)
    history = estimator.history_from_store(store)
    assert history.startup["cpu"] == pytest.approx(2.5, rel=0.15)
    assert history[("cpu", "conv")] == pytest.approx(1.1, rel=0.1)
    small = synthetic(local={"cpu": 0.01}, steps=60)
    est = estimator.estimate(small, LOCAL_CPU, spot=False, history=history)
    truth = 2.5 * 6.0 + 1.1 * (est.raw_run_seconds - 6.0)
    assert est.run_seconds == pytest.approx(truth, rel=0.1)
    # one correction for the whole run would be off for the small job by far more
    assert abs(estimator.estimate(small, LOCAL_CPU, spot=False).run_seconds / truth - 1) > 0.4


def test_runs_without_a_recorded_start_correct_the_step_only():
    history = estimator.fit_terms([("T4", "conv", 100.0, 150.0, None)])
    assert 1.0 < history[("T4", "conv")] < 1.5 and history.startup == {}
    assert estimator.startup_correction_for(history, "T4", "conv") == history[("T4", "conv")]


def test_a_finished_local_run_corrects_the_next_plan_of_that_model(tmp_path, monkeypatch):
    """As submit records it: the run's row is keyed as the estimator looks it up (cpu, the profile's family)."""
    import yaml

    from orchestrator.planning.spec import load_job
    from orchestrator.runs.executor import make_plan, record_job, restrict

    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", "workload": {
        "model": "tests.unit.test_profile:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32, "dataset_size": 320,
        "epochs": 2}}))
    spec = restrict(load_job(path), "local")
    store = Store()
    first = make_plan(spec, store=store)
    job_id = record_job(spec, first, store=store)
    store.set_status(job_id, "SUCCEEDED", actual_run_seconds=2 * first.chosen.estimate.run_seconds)
    again = make_plan(spec, store=store).chosen.estimate
    assert again.run_seconds > 1.5 * first.chosen.estimate.run_seconds
    assert estimator.history_from_store(store).startup["cpu"] > 1.5


def test_the_start_up_correction_is_the_machines_whatever_the_model():
    """A small CNN run shows the start is 2× its estimate; the first LSTM plan already counts it."""
    history = estimator.fit_terms([("CPU", "conv", 11.0, 21.0, 10.0)])  # start 10 of 11 s, took 21 s
    assert history.startup["cpu"] > 1.7
    assert estimator.startup_correction_for(history, "cpu", "lstm") == history.startup["cpu"]
    assert estimator.correction_for(history, "cpu", "lstm") == 1.0  # its steps: nothing known yet
