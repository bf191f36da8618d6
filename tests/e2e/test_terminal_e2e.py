"""`dlrun submit` in a pseudo-terminal on a real local Ray head: the live panel, Ray's own log lines kept
off the screen, one result line, and Ctrl-C (the byte a terminal sends) saying what it cancelled."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.support.job_files import head_env, local_script_job

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Terminal:
    """dlrun in a pseudo-terminal: everything it drew (escape codes removed), and keys to type."""

    def __init__(self, argv: list[str], env: dict):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: dlrun, as a user starts it
            # from an interactive shell, which gives its foreground command Ctrl-C's default; a test run started
            # in the background (`cmd &` in a script) ignores SIGINT, and an ignored signal stays ignored over exec
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.chdir(ROOT)
            os.execve(sys.executable, [sys.executable, "-m", "orchestrator.cli", *argv], env)
        self.raw = b""

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace"))

    def _pump(self, timeout: float) -> bool:
        """Take what the terminal shows within `timeout`; False once dlrun closed it."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the child exited and closed its side
            return False
        self.raw += chunk
        return bool(chunk)

    def read_until(self, pattern: str, timeout: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text):
            if time.monotonic() > deadline or not self._pump(0.2):
                return bool(re.search(pattern, self.text))
        return True

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait(self, timeout: float = 120.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            open_ = self._pump(0.2)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                for _ in range(50):
                    if not (open_ := self._pump(0.05)):
                        break
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, 9)
        raise AssertionError(f"dlrun did not exit:\n{self.text[-3000:]}")


@pytest.fixture
def env(ray_head, dlrun_home):
    return head_env(ray_head, dlrun_home, TERM="xterm-256color", COLUMNS="120", LINES="40")


def job_file(tmp_path: Path, script: str) -> Path:
    return local_script_job(tmp_path, script, "term")


def test_the_screen_says_what_happened_once(env, tmp_path):
    job = job_file(tmp_path, "from jobs.metrics import report, report_result\nprint('hello from the job')\n"
                             "report(epoch=1, epochs=1, train_acc=0.5)\nreport_result(train_acc=0.75)\n")
    term = Terminal(["submit", str(job), "--backend", "local"], env)

    assert term.wait() == 0, term.text[-3000:]
    shown = term.text
    assert "running on local CPU" in shown and "hello from the job" in shown
    assert "train_acc 0.5" in shown  # the job's own label, not "accuracy" / "held-out accuracy"
    (result,) = [ln for ln in shown.splitlines() if " SUCCEEDED on local CPU in " in ln]  # once
    assert result.rstrip().endswith(": train_acc=0.75")
    assert "dashboard_sdk" not in shown and "INFO" not in shown and "Running entrypoint" not in shown
    assert "local local cpu" not in shown and "held-out" not in shown


def test_ctrl_c_says_what_it_cancelled_and_the_record_keeps_the_time(env, tmp_path):
    from orchestrator.state.db import Store

    job = job_file(tmp_path, "import time\nfor i in range(600):\n    print('tick', i)\n    time.sleep(0.2)\n")
    term = Terminal(["submit", str(job), "--backend", "local"], env)
    assert term.read_until(r"tick 3"), term.text[-3000:]

    term.type(b"\x03")  # Ctrl-C, as the terminal sends it to the foreground process group
    assert term.read_until(r"cancel the job\? \[Y/n\]", timeout=30), term.text[-3000:]
    term.type(b"y\r")

    assert term.wait() == 130, term.text[-3000:]
    (line,) = [ln for ln in term.text.splitlines() if " CANCELLED on local CPU after " in ln]
    assert "(cancelled with Ctrl-C): Ray job dlrun-" in line and "stopped; nothing is left running" in line
    job_id = line.split()[0]
    row = Store(Path(env["DLRUN_HOME"]) / "state.db").get_job(job_id)
    assert row.status == "CANCELLED" and row.actual_seconds > 0.5
    assert json.loads(row.spec_json)["name"] == "term"
