"""`python -m jobs.tee -- COMMAND...`: run a user's command, pass its output on byte for byte, and say
how far it is from what it prints (jobs/progress.py: tqdm, Lightning and HF Trainer bars, epoch and
metric lines).

dlrun runs every `run:` job through this wrapper. Between the command's lines it adds, at most every
EMIT_S seconds (EMIT_PROBE_S while dlrun probes the job), a jobs.metrics line with what it read:

    DLRUN_METRIC {"progress":0.42,"step":84,"steps":200,"eta_s":31.0,"loss":0.41,...}

(after a bar's carriage-return update, on a line of its own), and publishes those numbers as
jobs.metrics' Ray gauges (dlrun_progress, dlrun_eta_seconds, dlrun_loss, ...). A job that prints its
own DLRUN_METRIC lines (jobs.metrics.report) is exact: from its first one on, nothing is added.
COMMAND's stderr is merged into its stdout, as Ray's job log has them anyway. The exit code is the
command's (128+N when a signal N ended it).
"""
from __future__ import annotations

import codecs
import json
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time

from jobs.metrics import FLUSH_ENV, METRIC_PREFIX, probing, publish
from jobs.progress import ProgressReader

EMIT_S = 5.0
EMIT_PROBE_S = 1.0
# names a job commonly uses for what a jobs.metrics gauge shows
GAUGE_ALIASES = {"acc": "accuracy", "val_acc": "accuracy", "learning_rate": "lr"}


class _Gauges:
    """Publishes in a thread of its own: connecting to Ray takes seconds the output must not wait."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="dlrun-tee-gauges", daemon=True)
        self.used = False

    def put(self, values: dict) -> None:
        if not self.used:
            self.used = True
            self._thread.start()
        self._queue.put({**{GAUGE_ALIASES[k]: v for k, v in values.items() if k in GAUGE_ALIASES}, **values})

    def _run(self) -> None:
        while True:
            values = self._queue.get()
            if values is None:
                return
            publish(values)

    def close(self) -> None:
        if not self.used:
            return
        self._queue.put(None)
        self._thread.join(timeout=30)
        try:  # Ray exports gauges every 10 s: as jobs.metrics.report_result, wait when asked to
            time.sleep(max(0.0, float(os.environ.get(FLUSH_ENV) or 0)))
        except ValueError:
            pass


def run(command: list[str]) -> int:
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Ray and dlrun's probe signal the whole process group, the command included; a SIGTERM sent to this
    # process alone is passed on. SIGINT (a terminal's Ctrl-C) reaches the command through its group.
    signal.signal(signal.SIGTERM, lambda signum, frame: _signal(child, signum))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    reader = ProgressReader()
    gauges = _Gauges()
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    every = EMIT_PROBE_S if probing() else EMIT_S
    out = sys.stdout.fileno()
    exact, line_open, last_emit, seen = False, False, 0.0, ""
    stdout = child.stdout
    assert stdout is not None  # stdout=PIPE
    sel = selectors.DefaultSelector()
    sel.register(stdout, selectors.EVENT_READ)
    try:
        while True:
            sel.select()
            chunk = os.read(stdout.fileno(), 65536)
            if not chunk:
                break
            _write(out, chunk)
            line_open = not chunk.endswith((b"\n", b"\r"))
            text = decode(chunk)
            if not exact:
                seen = (seen + text)[-2 * len(METRIC_PREFIX):]
                exact = METRIC_PREFIX in seen or METRIC_PREFIX in text
            if exact:
                continue
            reader.feed(text)
            now = time.monotonic()
            # never inside a line of the command's own, but after a bar's \r update (whole lines never come)
            if reader.changed and now - last_emit >= every and (not line_open or reader.open_bar):
                last_emit = now
                _emit(out, reader.snapshot(), line_open, gauges)
        reader.flush()
        if not exact and reader.changed:
            _emit(out, reader.snapshot(), line_open, gauges)
    finally:
        sel.close()
        code = child.wait()
        gauges.close()
    return 128 - code if code < 0 else code


def _emit(out: int, payload: dict, line_open: bool, gauges: _Gauges) -> None:
    if not payload:
        return
    line = METRIC_PREFIX + json.dumps(payload, separators=(",", ":")) + "\n"
    _write(out, (("\n" if line_open else "") + line).encode())
    gauges.put(payload)


def _write(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BrokenPipeError:
            return


def _signal(child: subprocess.Popen, signum: int) -> None:
    try:
        child.send_signal(signum)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[1:] if args[:1] == ["--"] else args
    if not command:
        print("usage: python -m jobs.tee -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    return run(command)


if __name__ == "__main__":
    sys.exit(main())
