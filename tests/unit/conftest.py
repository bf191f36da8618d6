"""The unit tier: in-process tests, no sockets, no subprocesses, no Ray, no moto; seconds in all.
This machine's CPU probe measured once for the tier; for the run-loop tests a store on a temp file and a
clock that moves only when told."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from orchestrator.planning.probe import cpu_probe
from orchestrator.state.db import Store
from tests.support.fakes_runs import FakeClock
from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, Path(__file__).parent, "unit")


@pytest.fixture(scope="session")
def machine_probe(tmp_path_factory) -> Path:
    """This machine's CPU probe (orchestrator/planning/probe.py: 0.5 s of torch), measured once per session."""
    home = tmp_path_factory.mktemp("probe-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLRUN_HOME", str(home))
        cpu_probe()
    return home / "profiles" / "cpu_probe.json"


@pytest.fixture(autouse=True)
def _measured_machine(request, dlrun_home):
    """Each test's $DLRUN_HOME holds the session's CPU probe, as a user's does after the first plan on the
    machine (a copy: no test changes another's); tests of the measuring itself (mark fresh_machine) start bare."""
    if request.node.get_closest_marker("fresh_machine"):
        return
    (dlrun_home / "profiles").mkdir(exist_ok=True)
    shutil.copy(request.getfixturevalue("machine_probe"), dlrun_home / "profiles" / "cpu_probe.json")


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
