"""The unit tier's guard (tests/support/in_process.py, installed by tests/unit/conftest.py): what would
leave this process is refused with one line that says where the test belongs."""
from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from multiprocessing import get_context

import pytest

from tests.support.in_process import OnImport, UnitTierBreach

MOVE = r"unit tests stay in-process: move this test to tests/integration \(it "


def test_a_network_connection_is_refused(in_process_guard):
    with pytest.raises(UnitTierBreach, match=MOVE + r"called socket.connect\(\('127.0.0.1', 9\)\) on a AF_INET"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    assert len(in_process_guard.taken()) == 1


def test_a_listening_socket_and_a_unix_socket_are_refused(in_process_guard, tmp_path):
    with socket.socket() as server, pytest.raises(UnitTierBreach, match=MOVE + r"called socket.bind"):
        server.bind(("127.0.0.1", 0))
    with socket.socket(socket.AF_UNIX) as local, pytest.raises(UnitTierBreach, match="AF_UNIX"):
        local.connect(str(tmp_path / "daemon.sock"))
    assert len(in_process_guard.taken()) == 2


def test_a_socketpair_stays_in_the_process(in_process_guard):
    left, right = socket.socketpair()  # asyncio's self-pipe: no address, no peer outside
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
    assert in_process_guard.taken() == []


@pytest.mark.parametrize("start, shown", [
    (lambda: subprocess.run(["true"], check=False), r"started a subprocess: \['true'\]"),
    (lambda: os.system("true"), r"called os.system\('true'\)"),
    (lambda: os.fork() or os._exit(0), r"called os.fork"),  # were the guard off, the child would leave at once
    (lambda: get_context("spawn").Process(target=print).start(), r"called _posixsubprocess.fork_exec"),
], ids=["subprocess", "os.system", "os.fork", "multiprocessing"])
def test_a_new_process_is_refused(in_process_guard, start, shown):
    with pytest.raises(UnitTierBreach, match=MOVE + shown):
        start()
    assert in_process_guard.taken()


def test_ray_init_is_refused(in_process_guard):
    ray = pytest.importorskip("ray")  # a test extra: installed wherever the tiers run

    with pytest.raises(UnitTierBreach, match=MOVE + r"called ray.init\(address\)"):
        ray.init(address="auto")
    assert in_process_guard.taken()


def test_a_module_is_guarded_as_it_is_first_imported(tmp_path, monkeypatch):
    """How ray.init is guarded in a test that imports ray first: OnImport patches the module as it loads."""
    (tmp_path / "first_imported_here.py").write_text("def init():\n    return 'started'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = OnImport("first_imported_here", lambda module: setattr(module, "init", lambda: "refused"))
    monkeypatch.delitem(sys.modules, "first_imported_here", raising=False)
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module("first_imported_here")
    finally:
        sys.meta_path.remove(finder)
    assert module.init() == "refused"


def test_a_breach_the_code_swallowed_is_still_recorded(in_process_guard):
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    except Exception:  # as code that falls back when a service is unreachable
        pass
    assert in_process_guard.taken() == [
        "unit tests stay in-process: move this test to tests/integration "
        "(it called socket.connect(('127.0.0.1', 9)) on a AF_INET socket)"]
