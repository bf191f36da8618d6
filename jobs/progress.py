"""How far a job is, read from what it already prints: one parser for the progress people print.

Read (each checked against the real packages' output in tests/integration/test_progress_parser.py):
- tqdm bars, also as carriage-return updates of one line: `desc: 45%|████ | 9/20 [00:01<00:02, 6.1it/s, loss=0.3]`;
  the bars of the Hugging Face Trainer (one bar over all steps) and of Lightning's TQDMProgressBar
  (`Epoch 3: 45%|...| 14/32 [..., train_loss=0.3]`, one bar per epoch, the epoch counted from 0) are such bars;
- Lightning's RichProgressBar: `Epoch 2/9 ━━━━ 14/32 0:00:01 • 0:00:02 12.3it/s train_loss: 0.3` (epoch
  index / last index). Without a terminal, rich draws it once, when training ends;
- `epoch 3/10` (or `Epoch 3 of 10`) anywhere in a line or a bar's description: counted from 1, unless the
  first one seen is epoch 0;
- Python dict lines, as the HF Trainer logs them: `{'loss': 0.69, 'learning_rate': 4e-05, 'epoch': 0.5}`;
- key=value or key: value metric lines whose keys name a metric (loss, acc/accuracy, lr, f1, ...: METRIC_KEY).

A bar whose description names validation, testing or sanity checking is not the run's progress; of the
others, the bar with the largest total is (the HF Trainer's evaluation bar is shorter than its training
bar). The run's share done is known from a bar over the whole run (no epoch in its description), from
`epoch i/N` (plus the epoch bar's share), or is None.

Nested tqdm bars (`for e in trange(E): for b in tqdm(batches, leave=False)`): tqdm draws a bar at position
1 and below after a newline and moves the cursor back up (`ESC[A`) after it; a `leave=False` bar is cleared
(blanks, `ESC[A`) when it closes, and the next one starts again at 0. Such a bar, or one that starts again,
is an inner bar: each of its rounds is one step of the outer bar, which counts the run, whatever the two
totals. The share is then (outer n + inner n / inner total) / outer total.

Pure stdlib: it runs in the job's wrapper (jobs/tee.py) as well as in dlrun itself.
"""
from __future__ import annotations

import ast
import re
import time
from dataclasses import dataclass, field
from typing import Callable

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CURSOR_UP = "\x1b[A"  # tqdm's move back up after drawing a bar at position 1 or below
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_COUNT = r"\d+(?:\.\d+)?[kMGTP]?"
TQDM_BAR = re.compile(
    r"(?P<desc>.*?)(?::\s*)?(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>" + _COUNT + r")/(?P<total>" + _COUNT + r")"
    r"\s*\[(?P<elapsed>[\d:]+)<(?P<remaining>[\d:?]+)(?:,\s*(?P<rate>[^,\]]*))?(?:,\s*(?P<postfix>[^\]]*))?\]")
RICH_BAR = re.compile(  # Lightning's RichProgressBar
    r"^(?P<desc>.*?)\s+[━╸╺─\s]+\s(?P<n>\d+)/(?P<total>\d+)\s+(?P<elapsed>[\d:]+)\s+•\s+(?P<remaining>[\d:\-]+)"
    r"(?:\s+(?P<rate>" + _NUM + r"it/s))?\s*(?P<postfix>.*)$")
EPOCH = re.compile(r"\bepoch\s*[:#]?\s*(?P<i>\d+)\s*(?:/|\bof\b)\s*(?P<n>\d+)", re.IGNORECASE)
EPOCH_ONLY = re.compile(r"^\s*epoch\s+(?P<i>\d+)\b", re.IGNORECASE)
PAIR = re.compile(r"(?P<k>[A-Za-z_][\w./-]*)\s*[=:]\s*(?P<v>" + _NUM + r")(?![\w.])")
# a key that names a metric: loss, val_loss, train/acc, accuracy, lr, learning_rate, f1, ppl, grad_norm ...
METRIC_KEY = re.compile(r"(?:^|[_./-])(?:loss|acc|accuracy|lr|learning_rate|f1|auc|ppl|perplexity|error|err|"
                        r"top1|top5|grad_norm|mae|mse|rmse|bleu|iou|map)$", re.IGNORECASE)
NOT_THE_RUN = re.compile(r"valid|sanity|test|predict|eval", re.IGNORECASE)
SKIP_KEYS = {"v_num"}  # Lightning's logger version in its bar: not a metric


@dataclass
class Bar:
    n: float
    total: float
    elapsed_s: float | None
    remaining_s: float | None
    rate: float | None  # iterations per second
    epoch: int | None  # the epoch in the bar's description
    epochs: int | None  # how many epochs, when the description says
    metrics: dict
    zero_based: bool = False  # Lightning's bars count epochs from 0


@dataclass
class ProgressReader:
    """Feed it the job's output (any chunks, `\\r` updates included); `snapshot()` says how far it is."""
    clock: Callable[[], float] = time.monotonic
    share: float | None = None  # of the whole run, 0-1
    epoch: int | None = None  # epochs finished or under way, counted from 1
    epochs: int | None = None
    step: float | None = None  # of the main bar
    steps: float | None = None
    step_is_run: bool = False  # the main bar counts the whole run (not one epoch)
    rate: float | None = None  # main bar iterations per second
    remaining_s: float | None = None
    metrics: dict = field(default_factory=dict)
    changed: bool = False  # something new since the last snapshot
    _zero_based: bool | None = None
    _main_total: float = 0.0
    _pending: str = ""
    open_bar: bool = False  # the output ends inside a line, and that line is a bar (tqdm's \r update)
    _first: tuple[float, float] | None = None  # (clock, share) when a share was first known
    _rounds: dict = field(default_factory=dict)  # bar key -> its last n, of bars seen so far
    _inner: tuple | None = None  # the key of a bar that restarts (or is drawn below another): one step's bar
    _outer: tuple | None = None  # the key of the bar over the whole run, once an inner one is known
    _outer_n: float = 0.0

    def feed(self, text: str) -> None:
        """Take more output; complete segments (ended by \\n or \\r) are read, the rest waits."""
        text = self._pending + text
        parts = re.split(r"[\r\n]", text)
        self._pending = parts.pop()
        for part in parts:
            self.read_segment(part)
        # tqdm ends each update with the bar itself (the next one starts with \r): read it now
        self.open_bar = bool(self._pending) and parse_bar(ANSI.sub("", self._pending).strip()) is not None
        if self.open_bar:
            self.read_segment(self._pending)

    def flush(self) -> None:
        """The output ended: read what was left unterminated."""
        if self._pending:
            self.read_segment(self._pending)
            self._pending = ""

    def read_segment(self, segment: str) -> None:
        line = ANSI.sub("", segment).strip()
        if not line:
            return
        bar = parse_bar(line)
        if bar is not None:
            if not self._nested(bar, line, below=CURSOR_UP in segment):
                self._take_bar(bar, line)
            return
        if line.startswith("{") and line.endswith("}"):
            values = parse_dict(line)
            if values:
                self._take_metrics(values)
                return
        epoch = EPOCH.search(line)
        if epoch:
            self._take_epoch(int(epoch["i"]), int(epoch["n"]), within=None)
        pairs = metric_pairs(line)
        if pairs:
            self._take_metrics(pairs)

    def _nested(self, bar: Bar, line: str, below: bool) -> bool:
        """Read a bar as one of two nested ones; False when it is not (it is read as a bar on its own)."""
        desc = line.split("|", 1)[0]
        if bar.epoch is not None or NOT_THE_RUN.search(desc):
            return False
        key = (re.sub(r"[\s\d%:]+", " ", desc).strip(), bar.total)  # its description without the percentage
        last = self._rounds.get(key)
        self._rounds[key] = bar.n
        if key != self._inner and (below or (last is not None and bar.n < last)):
            outers = [k for k in self._rounds if k != key and self._rounds[k] < k[1]]  # unfinished others
            if not outers:
                return False  # a bar that starts again with no bar over it: its epochs are not counted
            self._inner, self._outer = key, outers[0]
            self._outer_n = self._rounds[self._outer]
        if self._inner is None or self._outer is None:
            return False
        self._take_metrics(bar.metrics)
        if key == self._outer:
            self._outer_n = bar.n
            within = 0.0
        elif key == self._inner:
            within = bar.n / bar.total if bar.total else 0.0
            self.rate, self.remaining_s = bar.rate, None
        else:
            return True  # a third bar beside the two: not the run's
        steps = self._outer[1]
        self.step, self.steps, self.step_is_run, self.changed = self._outer_n, steps, True, True
        if steps:
            self._set_share(min(1.0, (self._outer_n + min(within, 1.0)) / steps,
                                (self._outer_n + 1) / steps))
        return True

    def _take_bar(self, bar: Bar, line: str) -> None:
        self._take_metrics(bar.metrics)
        desc = line.split("|", 1)[0] if "|" in line else line
        if NOT_THE_RUN.search(desc) and bar.epoch is None:
            return
        if bar.total < self._main_total and bar.epoch is None:
            return  # a shorter bar beside the main one (e.g. an evaluation pass)
        self._main_total = max(self._main_total, bar.total)
        self.step, self.steps, self.rate = bar.n, bar.total, bar.rate
        self.remaining_s = bar.remaining_s
        self.changed = True
        within = bar.n / bar.total if bar.total else None
        if bar.zero_based and self._zero_based is None:
            self._zero_based = True
        if bar.epoch is not None and bar.epochs is not None:
            self._take_epoch(bar.epoch, bar.epochs, within=within)
        elif bar.epoch is not None:  # Lightning's TQDMProgressBar: the epoch index, no count
            self.step_is_run = False
            self.epoch = bar.epoch + 1
        else:
            self.step_is_run = True
            if within is not None:
                self._set_share(within)

    def _take_epoch(self, i: int, n: int, within: float | None) -> None:
        if n <= 0 or i > n:
            return
        if self._zero_based is None:
            self._zero_based = i == 0
        self.step_is_run = False
        epochs = n
        if within is None:  # a line: the epoch it names has ended (1-based) or is the index (0-based)
            done = i + 1 if self._zero_based else i
        else:  # a bar: that epoch is under way
            done = (i if self._zero_based else i - 1) + within
        self.epoch, self.epochs = (i + 1 if self._zero_based else i), epochs
        self.changed = True
        self._set_share(min(1.0, done / epochs))

    def _set_share(self, share: float) -> None:
        if not 0.0 <= share <= 1.0 or (self.share is not None and share < self.share):
            return  # a share never goes back
        self.share = share
        if share > 0 and self._first is None:
            self._first = (self.clock(), share)

    def _take_metrics(self, values: dict) -> None:
        for k, v in values.items():
            if k not in SKIP_KEYS:
                self.metrics[k] = v
                self.changed = True

    def eta_s(self) -> float | None:
        """Seconds left: the bar's own estimate when it counts the run, else the share's rate so far."""
        if self.step_is_run and self.remaining_s is not None:
            return self.remaining_s
        if self._first is None or self.share is None or self.share >= 1.0:
            return 0.0 if self.share == 1.0 else None
        t0, p0 = self._first
        elapsed = self.clock() - t0
        if self.share <= p0 or elapsed <= 0:
            return None
        return (1.0 - self.share) * elapsed / (self.share - p0)

    def snapshot(self) -> dict:
        """What is known, as a jobs.metrics payload: progress (share of the run), epoch/epochs, step/steps
        (of a bar over the whole run; batch/batches of an epoch's bar), eta_s, it_per_s and the metrics
        under the job's own names."""
        self.changed = False
        out: dict = {}
        if self.share is not None:
            out["progress"] = round(self.share, 4)
        if self.epoch is not None:
            out["epoch"] = self.epoch
        if self.epochs is not None:
            out["epochs"] = self.epochs
        if self.step is not None:
            keys = ("step", "steps") if self.step_is_run else ("batch", "batches")
            out[keys[0]], out[keys[1]] = _int(self.step), _int(self.steps)
        eta = self.eta_s()
        if eta is not None:
            out["eta_s"] = round(eta, 1)
        if self.rate is not None:
            out["it_per_s"] = self.rate
        for k, v in self.metrics.items():
            out.setdefault(k, v)
        return out


def terminal_lines(text: str) -> list[str]:
    """The lines of `text` as a terminal leaves them: of each line's carriage-return updates (a tqdm bar's),
    only the last one shown."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [terminal_line(line) for line in lines]


def terminal_line(line: str) -> str:
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


def parse_bar(line: str) -> Bar | None:
    m = TQDM_BAR.search(line)
    rich = None if m else RICH_BAR.match(line)
    m = m or rich
    if m is None:
        return None
    try:
        n, total = _count(m["n"]), _count(m["total"])
    except ValueError:
        return None
    desc = m["desc"] or ""
    epoch, epochs, zero_based = None, None, rich is not None
    e = EPOCH.search(desc)
    if e:
        epoch, epochs = int(e["i"]), int(e["n"])
        if rich is not None:  # Lightning's rich bar: `Epoch i/last`, both counted from 0
            epochs += 1
    else:
        e = EPOCH_ONLY.match(desc)
        if e:
            epoch, zero_based = int(e["i"]), "Epoch" in desc  # Lightning's TQDMProgressBar: `Epoch i`, from 0
    postfix = m["postfix"] or ""
    metrics = {k: v for k, v in _pairs(postfix).items() if k not in SKIP_KEYS}
    return Bar(n=n, total=total, elapsed_s=_clock(m["elapsed"]), remaining_s=_clock(m["remaining"]),
               rate=_rate(m["rate"]), epoch=epoch, epochs=epochs, metrics=metrics,
               zero_based=zero_based)


def parse_dict(line: str) -> dict:
    """The numbers of a printed Python dict (`{'loss': '0.69', 'epoch': 0.5}`; HF prints them as strings)."""
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {}
    if not isinstance(value, dict):
        return {}
    out = {}
    for k, v in value.items():
        number = _number(v)
        if isinstance(k, str) and number is not None:
            out[k] = number
    return out


def metric_pairs(line: str) -> dict:
    """key=value / key: value pairs of a line that names at least one metric (METRIC_KEY)."""
    pairs = _pairs(line)
    if not any(METRIC_KEY.search(k) for k in pairs):
        return {}
    return {k: v for k, v in pairs.items() if METRIC_KEY.search(k)}


def _pairs(text: str) -> dict:
    out = {}
    for m in PAIR.finditer(text):
        number = _number(m["v"])
        if number is not None:
            out[m["k"]] = number
    return out


def _number(v) -> float | int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            return int(v) if re.fullmatch(r"[-+]?\d+", v.strip()) else float(v)
        except ValueError:
            return None
    return None


def _count(text: str) -> float:
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    return float(text[:-1]) * scale[text[-1]] if text[-1] in scale else float(text)


def _clock(text: str | None) -> float | None:
    if not text or "?" in text or "-" in text:
        return None
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def _rate(text: str | None) -> float | None:
    """Iterations per second from tqdm's `12.3it/s` / `1.5s/it` (any unit)."""
    if not text:
        return None
    m = re.match(r"\s*(" + _NUM + r")\s*(\w*)/(\w+)", text)
    if not m:
        return None
    value = float(m[1])
    if m[3] == "s":
        return value
    return 1.0 / value if m[2] == "s" and value > 0 else None


def _int(x: float | None):
    return int(x) if x is not None and float(x).is_integer() else x
