"""The fixed start of a local job in its estimate: counted once (a probed job gets only Ray's share), and
corrected by finished runs apart from the step time. (Measured: tests/integration/test_local_start_measured.py
and, with a head up, tests/e2e/test_local_start_on_a_head.py.)"""
import json

import pytest

from orchestrator.estimate import estimator
from orchestrator.planning import startup
from orchestrator.state.db import Store
from orchestrator.states import JobStatus
from tests.support.planning import LOCAL_CPU, synthetic


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
                           est_run_seconds=est, est_start_seconds=start)
    store.finish(jid, JobStatus.SUCCEEDED, "", actual_seconds=actual, actual_run_seconds=actual)


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
        "model": "tests.support.models:TinyCNN", "input_shape": [1, 8, 8], "batch_size": 32, "dataset_size": 320,
        "epochs": 2}}))
    spec = restrict(load_job(path), "local")
    store = Store()
    first = make_plan(spec, store=store)
    job_id = record_job(spec, first, store=store)
    store.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=3.0,
                 actual_run_seconds=2 * first.chosen.estimate.run_seconds)
    again = make_plan(spec, store=store).chosen.estimate
    assert again.run_seconds > 1.5 * first.chosen.estimate.run_seconds
    assert estimator.history_from_store(store).startup["cpu"] > 1.5


def test_the_start_up_correction_is_the_machines_whatever_the_model():
    """A small CNN run shows the start is 2× its estimate; the first LSTM plan already counts it."""
    history = estimator.fit_terms([("CPU", "conv", 11.0, 21.0, 10.0)])  # start 10 of 11 s, took 21 s
    assert history.startup["cpu"] > 1.7
    assert estimator.startup_correction_for(history, "cpu", "lstm") == history.startup["cpu"]
    assert estimator.correction_for(history, "cpu", "lstm") == 1.0  # its steps: nothing known yet
