"""The unit tier's rule, enforced (tests/unit/conftest.py): a unit test stays in this process. Opening a
network socket, starting a process or starting Ray raises UnitTierBreach, and is recorded, so that a test
whose code swallows the error (`except Exception`) still fails with the same one line.

Guarded while a unit test and its function-scoped fixtures run (in every thread):
- sockets: socket.socket connect/connect_ex/bind of any family (create_connection, urllib, asyncio and
  HTTP clients all end there; AF_UNIX too: nothing in the tier needs one, and a local daemon is as much
  outside the process as a server). socket.socketpair (asyncio's self-pipe) connects nothing and is allowed;
- processes: subprocess.Popen (run, check_output, os.popen and asyncio's subprocesses build one),
  os.fork/forkpty/system/posix_spawn/posix_spawnp, and _posixsubprocess.fork_exec (multiprocessing's
  spawn and forkserver start methods call it directly);
- Ray: ray.init, also when ray is first imported during the test (a connection to a running head goes
  through Ray's C++ client, which the socket guard cannot see).
Not guarded: sockets and processes made by C extensions without Python's socket, subprocess or os modules
(grpc); module- and session-scoped fixtures, set up before it: the measurements the tier shares (the CPU
probe, a local job's start) and the libraries whose import leaves the process (tests/unit/conftest.py).
"""
from __future__ import annotations

import _posixsubprocess
import importlib.abc
import importlib.machinery
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import pytest


class UnitTierBreach(RuntimeError):
    pass


@dataclass
class InProcessGuard:
    breaches: list[str] = field(default_factory=list)  # each breach's message, in order
    _finder: importlib.abc.MetaPathFinder | None = None  # patches ray.init once ray is imported

    def refuse(self, what: str) -> UnitTierBreach:
        message = f"unit tests stay in-process: move this test to tests/integration ({what})"
        self.breaches.append(message)
        return UnitTierBreach(message)

    def taken(self) -> list[str]:
        """The breaches so far, forgotten (for a test of the guard itself, which breaks the rule on purpose)."""
        taken, self.breaches = self.breaches, []
        return taken

    def install(self, mp: pytest.MonkeyPatch) -> None:
        """Guards until `mp` is undone and uninstall() is called."""
        self._guard_sockets(mp)
        self._guard_processes(mp)
        self._guard_ray(mp)

    def uninstall(self) -> None:
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)

    def _guard_sockets(self, mp: pytest.MonkeyPatch) -> None:
        for method in ("connect", "connect_ex", "bind"):
            mp.setattr(socket.socket, method, self._refusing_socket_call(method))

    def _refusing_socket_call(self, method: str) -> Callable[..., Any]:
        def refused(sock: socket.socket, address: Any) -> Any:
            raise self.refuse(f"it called socket.{method}({address!r}) on a {sock.family.name} socket")
        return refused

    def _guard_processes(self, mp: pytest.MonkeyPatch) -> None:
        def popen(process: subprocess.Popen, args: Any, *rest: Any, **kw: Any) -> None:
            raise self.refuse(f"it started a subprocess: {args!r}")
        mp.setattr(subprocess.Popen, "__init__", popen)
        for name in ("fork", "forkpty", "system", "posix_spawn", "posix_spawnp"):
            if hasattr(os, name):
                mp.setattr(os, name, self._refusing(f"os.{name}"))
        mp.setattr(_posixsubprocess, "fork_exec", self._refusing("_posixsubprocess.fork_exec (multiprocessing)"))

    def _refusing(self, call: str) -> Callable[..., Any]:
        def refused(*args: Any, **kw: Any) -> Any:
            shown = f"{args[0]!r}" if args and isinstance(args[0], (str, bytes, list)) else "..."
            raise self.refuse(f"it called {call}({shown}): a new process")
        return refused

    def _guard_ray(self, mp: pytest.MonkeyPatch) -> None:
        ray = sys.modules.get("ray")
        if ray is not None:
            self._guard_ray_module(mp, ray)
            return
        self._finder = OnImport("ray", lambda module: self._guard_ray_module(mp, module))
        sys.meta_path.insert(0, self._finder)

    def _guard_ray_module(self, mp: pytest.MonkeyPatch, ray: ModuleType) -> None:
        def init(*args: Any, **kw: Any) -> Any:
            raise self.refuse(f"it called ray.init({', '.join([*map(repr, args), *map(str, kw)])})")
        mp.setattr(ray, "init", init)


class OnImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` right after the top-level module `name` is imported, before the import returns (the
    module found as sys.path would find it)."""

    def __init__(self, name: str, then: Callable[[ModuleType], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader: Any = spec.loader if spec else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            self.then(module)
        loader.exec_module = exec_module  # this spec's own loader instance: no other module's
        return spec
