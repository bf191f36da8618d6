"""jobs/progress.py on what the real packages print (tqdm, PyTorch Lightning with either of its bars, the
Hugging Face Trainer), captured here by running tiny scripts with them, not imitations; and
jobs/tee.py, which runs a command, passes its output on unchanged and adds what it read."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.metrics import parse_line
from jobs.progress import ProgressReader, metric_pairs, parse_dict, terminal_lines

ROOT = Path(__file__).resolve().parents[2]

TQDM = """
import time
from tqdm import tqdm
for epoch in range(1, 4):
    for i in tqdm(range(40), desc=f"epoch {epoch}/3", mininterval=0):
        time.sleep(0.002)
    print(f"epoch {epoch}/3 loss={1 / epoch:.4f} acc={0.5 + epoch / 10:.2f}", flush=True)
"""

LIGHTNING = """
import sys
import torch, lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from torch.utils.data import DataLoader, TensorDataset

class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 2)
    def training_step(self, b, i):
        loss = torch.nn.functional.cross_entropy(self.l(b[0]), b[1])
        self.log("train_loss", loss, prog_bar=True)
        return loss
    def validation_step(self, b, i):
        self.log("val_acc", (self.l(b[0]).argmax(1) == b[1]).float().mean(), prog_bar=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

x = torch.randn(320, 8)
dl = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=32)
bar = TQDMProgressBar() if sys.argv[1] == "tqdm" else RichProgressBar()
L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, callbacks=[bar]).fit(M(), dl, dl)
"""

HF = """
import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
cfg = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 num_labels=2)
class D(torch.utils.data.Dataset):
    def __init__(self, n):
        self.x = torch.randint(0, 64, (n, 8), generator=torch.Generator().manual_seed(n))
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": int(self.x[i, 0] > 32)}
args = TrainingArguments(output_dir="out", num_train_epochs=2, per_device_train_batch_size=8, logging_steps=10,
                         eval_strategy="epoch", save_strategy="no", report_to=[], use_cpu=True)
Trainer(model=BertForSequenceClassification(cfg), args=args, train_dataset=D(160), eval_dataset=D(48)).train()
"""


def output_of(script: str, tmp_path, *args: str, wrap: bool = False, **env_vars: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(script)
    command = [sys.executable, str(path), *args]
    if wrap:
        command = [sys.executable, "-m", "jobs.tee", "--", *command]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT), **env_vars}
    # stderr into stdout, in the order written, as Ray's job log has them
    r = subprocess.run(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert r.returncode == 0, r.stdout.decode()[-2000:]
    return r.stdout.decode()


def read(text: str) -> dict:
    reader = ProgressReader()
    reader.feed(text)
    reader.flush()
    return reader.snapshot()


def test_a_tqdm_loop_with_epoch_bars_and_metric_lines(tmp_path):
    out = output_of(TQDM, tmp_path)
    assert "\r" in out  # the bars' carriage-return updates, as a log gets them
    reader = ProgressReader()
    seen = []
    for chunk in out.split("\r"):  # as the wrapper gets it: piece by piece
        reader.feed(chunk + "\r")
        if reader.share is not None:
            seen.append(reader.share)
    assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == 1  # never back when the next epoch starts at 0
    snap = read(out)
    assert snap["progress"] == 1.0 and (snap["epoch"], snap["epochs"]) == (3, 3)
    assert snap["loss"] == pytest.approx(1 / 3, abs=1e-3) and snap["acc"] == pytest.approx(0.8)
    assert snap["batches"] == 40 and "steps" not in snap and snap["it_per_s"] > 0  # an epoch's bar, not the run's
    half = read(out[:out.index("epoch 2/3:  50%")] + "epoch 2/3:  50%|#####     | 20/40 [00:00<00:00, 99it/s]\n")
    assert half["progress"] == pytest.approx(1.5 / 3) and half["epoch"] == 2


@pytest.mark.parametrize("bar", ["tqdm", "rich"])
def test_lightning_bars_and_logged_metrics(tmp_path, bar):
    out = output_of(LIGHTNING, tmp_path, bar)
    snap = read(out)
    assert snap["train_loss"] > 0 and 0 <= snap["val_acc"] <= 1 and "v_num" not in snap
    assert snap["epoch"] == 3 and snap["batches"] == 10  # epochs 0, 1, 2 as Lightning counts: the third
    if bar == "rich":  # `Epoch 2/2`: index / last index, drawn once (no terminal) at the end
        assert "Epoch 2/2" in out and snap["epochs"] == 3 and snap["progress"] == 1.0
    else:  # `Epoch 2: 100%|...| 10/10 [...]`: the epoch but not how many: no share of the run
        assert "Epoch 2: 100%" in out and "epochs" not in snap and "progress" not in snap


def test_the_hf_trainer_bar_and_log_dicts(tmp_path):
    # tqdm draws at most every 0.1 s: ten tiny steps before the first log dict can all fall in one interval.
    # TQDM_MININTERVAL=0 (tqdm's own setting) draws each step, so the bar before that dict is mid-run
    out = output_of(HF, tmp_path, TQDM_MININTERVAL="0")
    assert "{'loss': " in out and "\x1b[A" in out  # its log dicts, and its evaluation bar under the main one
    snap = read(out)
    assert (snap["step"], snap["steps"], snap["progress"]) == (40, 40, 1.0)  # the training bar, not the eval one
    assert snap["loss"] > 0 and snap["learning_rate"] > 0 and snap["eval_loss"] > 0 and snap["epoch"] == 2
    reader = ProgressReader()
    reader.feed(out[:out.index("{'loss': ")])
    assert 0 < reader.share < 1 and reader.snapshot()["eta_s"] >= 0  # the bar's own remaining time


def test_metric_lines_and_dicts_under_their_own_names():
    assert metric_pairs("step 10: loss=0.25 val_acc: 0.9 lr=3e-4 batch_size=32") == \
        {"loss": 0.25, "val_acc": 0.9, "lr": 3e-4}
    assert metric_pairs("Total params: 18") == {} and metric_pairs("seed=1 batch_size=32") == {}
    assert parse_dict("{'loss': '0.69', 'epoch': 0.5, 'name': 'x'}") == {"loss": 0.69, "epoch": 0.5}
    assert parse_dict("{broken") == {} and parse_dict("[1, 2]") == {}
    assert terminal_lines("a\rb 10%\rb 20%\nc\n") == ["b 20%", "c"]


def test_the_wrapper_passes_the_output_on_and_adds_what_it_read(tmp_path):
    plain = output_of(TQDM, tmp_path)
    wrapped = output_of(TQDM, tmp_path, wrap=True)
    added = [line for line in terminal_lines(wrapped) if "DLRUN_METRIC" in line]
    assert added and all(line.startswith("DLRUN_METRIC ") for line in added)  # lines of their own
    rest = "".join(part for part in wrapped.split("\n") if not part.startswith("DLRUN_METRIC "))
    strip_times = lambda s: "".join(c for c in s if not c.isdigit())  # noqa: E731  (rates and times differ)
    assert strip_times(rest) == strip_times(plain.replace("\n", ""))
    kind, last = parse_line(added[-1])
    assert kind == "metric" and last["progress"] == 1.0 and last["epochs"] == 3 and "loss" in last


def test_a_script_s_own_jobs_metrics_lines_win_and_its_exit_code_is_kept(tmp_path):
    script = ("from tqdm import tqdm\nfrom jobs.metrics import report\n"
              "for i in tqdm(range(5), desc='epoch 1/2'):\n    pass\n"
              "report(epoch=1, epochs=2, loss=0.5)\n"
              "for i in tqdm(range(5), desc='epoch 2/2'):\n    pass\n"
              "print('loss=0.1')\nraise SystemExit(3)\n")
    path = tmp_path / "own.py"
    path.write_text(script)
    r = subprocess.run([sys.executable, "-m", "jobs.tee", "--", sys.executable, str(path)], cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3
    metric_lines = [json.loads(line.split(" ", 1)[1]) for line in terminal_lines(r.stdout) if "DLRUN_METRIC" in line]
    assert metric_lines[-1] == {"epoch": 1, "epochs": 2, "loss": 0.5}  # nothing added after the script's own


NESTED = """
import sys, time
from tqdm import tqdm, trange
epochs, batches = int(sys.argv[1]), int(sys.argv[2])
for epoch in trange(epochs, desc="training"):
    for i in tqdm(range(batches), desc="batches", leave=False, mininterval=0):
        time.sleep(0.002)
"""


@pytest.mark.parametrize("epochs,batches", [(6, 40), (40, 6)], ids=["inner-longer", "outer-longer"])
def test_nested_bars_the_outer_is_the_run_and_each_inner_round_one_step(tmp_path, epochs, batches):
    """trange outside, tqdm(leave=False) inside, as tqdm draws them into a pipe: the inner bar after a newline
    with a cursor-up escape, cleared when it closes, started again at 0 for each epoch; whichever total is
    larger, the share is the outer bar's with the inner's round inside it, and it never goes back."""
    out = output_of(NESTED, tmp_path, str(epochs), str(batches))
    assert "\x1b[A" in out  # the cursor movement a terminal would follow
    reader = ProgressReader()
    seen, at_outer = [], []
    for chunk in out.split("\r"):  # as the wrapper gets it: piece by piece
        reader.feed(chunk + "\r")
        if reader.share is not None:
            seen.append(reader.share)
        outer = re.search(r"training:.*\| (\d+)/\d+ \[", chunk)
        if outer:  # the outer bar drawn again: that many epochs done, the next inner round not begun
            at_outer.append((reader.share, int(outer[1]) / epochs))
    reader.flush()
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert len(set(seen)) > len(at_outer)  # steps inside an epoch count, not only whole epochs
    assert len(at_outer) >= 2 and all(share == pytest.approx(done) for share, done in at_outer)
    snap = reader.snapshot()
    assert (snap["step"], snap["steps"]) == (epochs, epochs)
