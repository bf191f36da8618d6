"""The unit tier: in-process tests, no sockets, no subprocesses, no Ray, no moto; seconds in all.
This machine's CPU probe and a local job's start measured once for the tier; for the run-loop tests a store
on a temp file and a clock that moves only when told."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.planning import startup
from orchestrator.planning.probe import cpu_probe
from orchestrator.state.db import Store
from tests.support.fakes_runs import FakeClock
from tests.support.tiers import mark_folder


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
