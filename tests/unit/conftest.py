"""The unit tier: in-process tests, no sockets, no subprocesses, no Ray, no moto; seconds in all.
Fixtures of the fast run-loop tests: a store on a temp file and a clock that moves only when told."""
from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.state.db import Store
from tests.support.fakes_runs import FakeClock
from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, Path(__file__).parent, "unit")


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
