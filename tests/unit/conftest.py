"""The unit tier: in-process tests, no sockets, no subprocesses, no Ray, no moto; seconds in all. The rule is
enforced (tests/support/in_process.py): a unit test that opens a socket, starts a process or starts Ray fails
with one line saying so. This machine's CPU probe and a local job's start measured once for the tier, before
the guard is up; for the run-loop tests a store on a temp file and a clock that moves only when told."""
from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest

from orchestrator.planning import startup
from orchestrator.planning.probe import cpu_probe
from orchestrator.state.db import Store
from tests.support.fakes_runs import FakeClock
from tests.support.in_process import InProcessGuard
from tests.support.tiers import mark_folder

GUARD = pytest.StashKey[InProcessGuard]()


def pytest_collection_modifyitems(items):
    mark_folder(items, Path(__file__).parent, "unit")


@pytest.fixture(scope="session")
def machine_profiles(tmp_path_factory) -> Path:
    """What dlrun measures once per machine, measured once per session (as by a user's first plan): the CPU
    probe (orchestrator/planning/probe.py: 0.5 s of torch) and a local job's start (planning/startup.py: a
    fresh Python process importing torch; with no head of dlrun's up, no Ray job)."""
    home = tmp_path_factory.mktemp("machine-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLRUN_HOME", str(home))
        cpu_probe()
        startup.measure()
    return home / "profiles"


@pytest.fixture(autouse=True)
def _measured_machine(request, dlrun_home):
    """Each test's $DLRUN_HOME holds the session's machine measurements, as a user's does after the first plan
    (copies: no test changes another's); tests of the measuring itself (mark fresh_machine) start bare."""
    if request.node.get_closest_marker("fresh_machine"):
        return
    shutil.copytree(request.getfixturevalue("machine_profiles"), dlrun_home / "profiles", dirs_exist_ok=True)


@pytest.fixture(scope="session", autouse=True)
def _libraries_imported():
    """Libraries whose import leaves the process once, imported before the guard is up (as by any dlrun command
    that needs them): croniter (dlrun's cron) asks platform.architecture(), which runs `file` on the
    interpreter (croniter/croniter.py, is_32bit); urllib3 (under requests, boto3 and Ray's job SDK) binds a
    socket to ::1 to learn whether IPv6 works (urllib3/util/connection.py, HAS_IPV6); matplotlib's font manager
    (under `dlrun plan --plot`) runs `fc-list` to build its font cache the first time it is imported on a machine
    (matplotlib/font_manager.py, _get_fontconfig_fonts): on a fresh CI machine the first plot test failed for it."""
    for name in ("croniter", "urllib3", "matplotlib.font_manager"):
        importlib.import_module(name)


@pytest.fixture(autouse=True)
def in_process_guard(request, _libraries_imported, _measured_machine, monkeypatch):
    """Every unit test and its function-scoped fixtures run guarded (after the session's measurements)."""
    guard = InProcessGuard()
    request.node.stash[GUARD] = guard
    guard.install(monkeypatch)
    yield guard
    guard.uninstall()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose code caught the guard's error (`except Exception`) fails all the same, with its line (and a
    test that failed otherwise shows the line beside its own failure: the breach is likely why)."""
    report = yield
    guard = item.stash.get(GUARD, None)
    if report.when != "call" or guard is None or not guard.breaches:
        return report
    if report.passed:
        report.outcome = "failed"
        report.longrepr = guard.breaches[0]
    else:
        report.sections.append(("unit tier", "\n".join(guard.breaches)))
    return report


@pytest.fixture(autouse=True)
def _no_env_hooks(monkeypatch):
    monkeypatch.delenv("DLRUN_NODE_POLL_S", raising=False)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


@pytest.fixture
def clock():
    return FakeClock()
