"""The end-to-end tier: real Ray heads (local submit, scheduler, monitoring, team clusters, the framework
scripts), the emulated-VM lab and the browser; minutes. The session's Ray head and what reads it live here."""
import os
from pathlib import Path

import pytest

from tests.support.profiles import share_profiles
from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, Path(__file__).parent, "e2e")


@pytest.fixture(scope="session")
def vm_lab_cache():
    """The emulated-VM lab's Debian image and wheel cache (tests/support/vm/fixtures.py lab_cache): made once
    per session at most, before the first lab opens; skips where the lab cannot run."""
    from tests.support.vm.fixtures import lab_cache

    return lab_cache()


METRICS_INTERVAL_ENV = "RAY_metrics_report_interval_ms"


@pytest.fixture(scope="session")
def machine_profiles(tmp_path_factory):
    """One profiles directory for the session's end-to-end runs: what dlrun measures once per machine
    (the CPU probe, a local job's start) and once per workload (a training step) is measured by the first
    run that needs it and reused by the rest, as on a user's machine after the first submit. Tests of
    profiling itself (unit/test_profile.py, integration/test_isolated_profile.py, e2e/test_user_job_e2e.py) keep
    their own."""
    return tmp_path_factory.mktemp("machine-profiles")


@pytest.fixture
def shared_profiles(dlrun_home, machine_profiles):
    share_profiles(dlrun_home, machine_profiles)
    return dlrun_home


def start_head(tmp_path_factory):
    """A real Ray head started the way dlrun starts it (own process group). A token left in ~/.ray by
    any earlier local ray.init() must not lock dlrun out of its own head: the head starts with one."""
    from infra.local import head as raycluster

    home = tmp_path_factory.mktemp("head-home")
    user_home = tmp_path_factory.mktemp("user-home")
    (user_home / ".ray").mkdir()
    (user_home / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)
    saved = {k: os.environ.get(k) for k in ("DLRUN_HOME", "HOME", "RAY_AUTH_MODE", METRICS_INTERVAL_ENV)}
    # Ray's own setting (every RayConfig entry reads RAY_<name>), inherited by the head's processes and
    # its jobs: gauges exported every second instead of every 10 s, so a job need not linger 11 s
    # (DLRUN_METRICS_FLUSH_S) for its last values to reach the metrics endpoint (tests/e2e/test_monitoring_e2e.py)
    os.environ.update(DLRUN_HOME=str(home), HOME=str(user_home), **{METRICS_INTERVAL_ENV: "1000"})
    os.environ.pop("RAY_AUTH_MODE", None)
    try:
        return raycluster.start_local_head(dashboard_port=raycluster.free_port(), num_cpus=2)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One real Ray head for the session, with token auth like every head dlrun starts. Clients reach
    it as a user reaches a head dlrun did not start (DLRUN_RAY_ADDRESS): with Ray's own token settings
    in the environment (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH)."""
    from infra.local import head as raycluster

    head = start_head(tmp_path_factory)
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=head.token_path)
    yield head
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    raycluster.stop_local_head(head)


@pytest.fixture(scope="session")
def prometheus(ray_head, tmp_path_factory):
    """What `dlrun dashboard --metrics` starts — Prometheus with the head session's generated config —
    on a free port, up before the job so it scrapes it live, with that config's scrape interval (seconds). None
    when Prometheus is not installed."""
    import shutil
    import subprocess

    if not shutil.which("prometheus"):
        yield None
        return
    from infra.local import head as raycluster
    from orchestrator.monitoring.metrics_stack import ray_session_dir, start_prometheus

    session = ray_session_dir(ray_head)
    assert session is not None and session.name.endswith(f"_{ray_head.pgid}"), session
    config = session / "metrics" / "prometheus" / "prometheus.yml"
    assert config.exists(), config
    work = tmp_path_factory.mktemp("prometheus")
    port = raycluster.free_port()
    import yaml

    interval = str(yaml.safe_load(config.read_text())["global"]["scrape_interval"])  # Ray writes "10s"
    assert interval.endswith("s") and interval[:-1].isdigit(), interval
    proc = start_prometheus(config, data_dir=work / "data", port=port, log_path=work / "prometheus.log")
    yield {"proc": proc, "port": port, "log": work / "prometheus.log", "scrape_interval_s": int(interval[:-1])}
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture(scope="session")
def monitored_job(ray_head, prometheus, tmp_path_factory, machine_profiles):
    """One short digits-cnn job `dlrun submit`ted to the session head while its metrics endpoint is
    scraped: read by the monitoring tests and the dashboard browser test alike (one job, not one each). With
    Prometheus there, the job lingers after its last values (DLRUN_METRICS_FLUSH_S, the setting for this) one
    scrape interval and 2 s more, so a scrape falls after its final values whatever Prometheus's phase. (Ray
    exports a gauge only in the export after it was set; jobs/metrics.py sets the last values again every second,
    which is what lets a 10 s scrape see them: before that, the scrape test failed about one run in two.)"""
    from tests.support.monitoring import submit_digits_cnn

    flush_s = 5 if prometheus is None else prometheus["scrape_interval_s"] + 2
    return submit_digits_cnn(ray_head, tmp_path_factory.mktemp("monitoring"), flush_s=flush_s, watch_metrics=True,
                             profiles=machine_profiles)
