"""The training loop every built-in job shares: CLI, device/precision, checkpoints, reporting.

    python -m jobs.cnn [--epochs N] [--batch-size B] [--lr LR] [--seed S] [--checkpoint-dir DIR]
                       [--num-workers N] [--device auto|cpu|cuda] [--precision auto|fp32|fp16|bf16]

Determinism: the model is initialised from the seed, and each epoch's shuffle and dropout come
from (seed, epoch), so a run resumed from the checkpoint of epoch k ends with exactly the metrics
of an uninterrupted run (on CPU; CUDA kernels are not bitwise deterministic).
"""
from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from jobs.checkpoint import CHECKPOINT_ENV, CheckpointError, Checkpoints, open_checkpoints
from jobs.data import Split
from jobs.metrics import report, report_event
from jobs.notice import PreemptionNotice

EVAL_BATCH = 512


class JobConfigError(Exception):
    """A flag asks for something this machine cannot do: the message says what to change."""


@dataclass(frozen=True)
class Job:
    """A built-in training job: its model, its data and its default hyper-parameters."""
    name: str
    module: str  # importable module that defines JOB (used by Ray Train workers)
    build_model: Callable[[], nn.Module]
    load_data: Callable[[], Split]
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float = 0.0


@dataclass
class TrainConfig:
    epochs: int
    batch_size: int
    lr: float
    seed: int = 0
    checkpoint_dir: str | None = None
    num_workers: int = 1
    device: str = "auto"
    precision: str = "auto"
    cpu_threads: int = 1


@dataclass
class Rank:
    """Where this process sits in a (Ray Train) data-parallel group."""
    rank: int = 0
    world_size: int = 1
    device: str | None = None  # set by Ray Train (cuda:local_rank or cpu)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass
class Precision:
    name: str  # fp32 | fp16 | bf16
    dtype: torch.dtype | None = field(default=None)

    def autocast(self, device: torch.device):
        if self.dtype is None:
            return nullcontext()  # not even a disabled autocast on the fp32 hot path
        return torch.autocast(device.type, dtype=self.dtype)


def parse_args(job: Job, argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(prog=f"python -m {job.module}",
                                description=f"Train the {job.name} job on the digits data set.")
    p.add_argument("--epochs", type=int, default=job.epochs)
    p.add_argument("--batch-size", type=int, default=job.batch_size)
    p.add_argument("--lr", type=float, default=job.lr)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-dir", default=os.environ.get(CHECKPOINT_ENV) or None,
                   help=f"a directory, s3://BUCKET/PREFIX or gs://BUCKET/PREFIX "
                        f"(default: ${CHECKPOINT_ENV}; unset: no checkpoints)")
    p.add_argument("--num-workers", type=int, default=1,
                   help="data-parallel workers; more than 1 runs through Ray Train's TorchTrainer")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--precision", choices=("auto", "fp32", "fp16", "bf16"), default="auto")
    p.add_argument("--cpu-threads", type=int, default=1,
                   help="torch threads when training on CPU (0: torch's default). These models "
                        "are small: one thread is as fast, and far faster on a busy machine")
    a = p.parse_args(argv)
    for name in ("epochs", "batch_size", "num_workers"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.lr <= 0:
        p.error("--lr must be positive")
    if a.cpu_threads < 0:
        p.error("--cpu-threads must be 0 (torch's default) or more")
    return TrainConfig(epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, seed=a.seed,
                       checkpoint_dir=a.checkpoint_dir, num_workers=a.num_workers,
                       device=a.device, precision=a.precision, cpu_threads=a.cpu_threads)


EXPECT_GPU_ENV = "DLRUN_EXPECT_GPU"  # set by dlrun when it planned (and bills) a GPU for this job


def resolve_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise JobConfigError("--device cuda: no CUDA GPU is visible to this process; "
                             "use --device auto or cpu")
    asked_cpu = requested == "cpu"
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    return refuse_cpu_on_a_gpu_plan(torch.device(requested), requested_cpu=asked_cpu)


def refuse_cpu_on_a_gpu_plan(device: torch.device, requested_cpu: bool) -> torch.device:
    """A GPU was planned and is billed: never train on CPU by accident (--device cpu still may)."""
    if device.type == "cpu" and not requested_cpu and os.environ.get(EXPECT_GPU_ENV) == "1":
        raise JobConfigError(f"dlrun planned a GPU for this job ({EXPECT_GPU_ENV}=1) but torch "
                             f"{torch.__version__} sees none (torch.cuda.is_available() is false); refusing to "
                             "train on CPU while the GPU is billed: check the node's driver and torch build, "
                             "or pass --device cpu")
    return device


def resolve_precision(requested: str, device: torch.device) -> Precision:
    if requested == "auto":
        if device.type != "cuda":
            requested = "fp32"
        else:
            requested = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    dtypes = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}
    return Precision(requested, dtypes[requested])


def epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    """The seed of one epoch's shuffle (and, with the rank, its dropout)."""
    return (seed * 1_000_003 + epoch * 7919 + rank * 104_729) % (2 ** 63)


def _set_seed(seed: int) -> None:
    torch.manual_seed(seed)  # also seeds every CUDA device


def _rng_state() -> dict:
    state: dict[str, torch.Tensor | list[torch.Tensor]] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def _cpu_settings(cfg: TrainConfig, device: torch.device, where: Rank):
    """Thread count and deterministic kernels for this run; restored afterwards (for callers
    that train in-process, like tests and the profiler)."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        if device.type == "cpu":
            if cfg.cpu_threads:
                # tiny ops over several OpenMP threads slow down ~100x when the cores are shared
                torch.set_num_threads(cfg.cpu_threads)
            if where.world_size == 1:
                torch.use_deterministic_algorithms(True, warn_only=True)
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def train(job: Job, cfg: TrainConfig, where: Rank | None = None) -> dict:
    """Train (resuming from the latest checkpoint if any); returns the final result dict."""
    where = where or Rank()
    device = torch.device(where.device) if where.device else resolve_device(cfg.device)
    refuse_cpu_on_a_gpu_plan(device, requested_cpu=cfg.device == "cpu")
    # a preemption notice stops a single-process run at the next step, with a checkpoint of that step
    notice = PreemptionNotice.install() if cfg.checkpoint_dir and where.world_size == 1 else None
    try:
        with _cpu_settings(cfg, device, where):
            return _train(job, cfg, where, device, notice)
    finally:
        if notice is not None:
            notice.uninstall()


def _load_latest(store: Checkpoints, where: Rank, device: torch.device) -> dict | None:
    """The newest checkpoint; in a data-parallel group rank 0 reads it and sends it to all (the
    other ranks may sit on nodes that cannot see a local checkpoint directory)."""
    state = store.load_latest() if where.is_main else None
    if where.world_size > 1:
        box = [state]
        torch.distributed.broadcast_object_list(box, src=0,
                                                device=device if device.type == "cuda" else None)
        state = box[0]
    return state


@dataclass(frozen=True)
class _Resume:
    """Where a checkpoint left the run."""
    epoch: int  # epochs done
    step: int  # steps of the next epoch done (a preemption notice stopped it there)
    loss_sum: float  # the loss summed over those steps


@dataclass
class _Training:
    """One run's model, optimiser, checkpoints and history, as each epoch uses them."""
    job: Job
    cfg: TrainConfig
    where: Rank
    device: torch.device
    precision: Precision
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    store: Checkpoints | None
    notice: PreemptionNotice | None
    started: float  # time.perf_counter() at the start
    net: nn.Module | None = None  # the model, wrapped for data parallelism where there are several ranks
    history: list[dict] = field(default_factory=list)
    loss_fn: nn.Module = field(default_factory=nn.CrossEntropyLoss)

    def saved_state(self, done_epochs: int, step: int = 0, loss_so_far: float = 0.0) -> dict:
        return {"job": self.job.name, "epoch": done_epochs, "step": step, "loss_sum": loss_so_far,
                "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(), "rng": _rng_state(), "history": self.history,
                "seed": self.cfg.seed}

    def resume(self) -> _Resume | None:
        """Load the newest checkpoint into the model, optimiser, RNG and history (None: start afresh)."""
        if self.store is None:
            return None
        state = _load_latest(self.store, self.where, self.device)
        if state is None:
            return None
        if state.get("job") != self.job.name:
            raise CheckpointError(f"the checkpoint at {self.store.location} belongs to job "
                                  f"{state.get('job')!r}, not {self.job.name!r}: use another "
                                  "--checkpoint-dir")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        # the precision may differ after a move (fp16 on a T4 -> bf16 on an A100)
        if state["scaler"] and self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
        _restore_rng(state["rng"])
        self.history = list(state["history"])
        resume = _Resume(epoch=int(state["epoch"]), step=int(state.get("step", 0)),
                         loss_sum=float(state.get("loss_sum", 0.0)))
        if self.where.is_main:
            report_event("resumed", epoch=resume.epoch, step=resume.step, checkpoint=self.store.location)
        return resume

    def run_epoch(self, data: Split, epoch: int, resume: _Resume | None) -> float:
        """Train one epoch (from the step a mid-epoch checkpoint stopped at), evaluate, checkpoint and
        report it; returns its training samples per second."""
        order = _epoch_order(len(data.train_x), self.cfg.seed, epoch, self.where).to(self.device)
        skip = resume.step if resume is not None and epoch == resume.epoch + 1 else 0
        if not skip:  # resuming mid-epoch: the checkpoint's RNG state is where this epoch left it
            _set_seed(epoch_seed(self.cfg.seed, epoch, self.where.rank))
        tick = time.perf_counter()
        loss_sum = self._train_steps(data, epoch, order, skip, resume.loss_sum if resume and skip else 0.0)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        trained = len(order) - min(skip * self.cfg.batch_size, len(order))
        samples_per_s = trained * self.where.world_size / (time.perf_counter() - tick)
        self._end_epoch(data, epoch, loss_sum.item() / len(order), samples_per_s)
        return samples_per_s

    def _train_steps(self, data: Split, epoch: int, order: torch.Tensor, skip: int,
                     loss_start: float) -> torch.Tensor:
        """The epoch's optimiser steps after the first `skip`; the loss summed over the epoch's samples."""
        net = self.net if self.net is not None else self.model
        net.train()
        loss_sum = torch.full((), loss_start, device=self.device)
        batches = range(0, len(order), self.cfg.batch_size)
        for step, i in enumerate(batches, start=1):
            if step <= skip:
                continue
            idx = order[i:i + self.cfg.batch_size]
            loss_sum += self._step(net, data.train_x[idx], data.train_y[idx]) * len(idx)
            if step < len(batches):  # the epoch's last step: its end checkpoints it
                self._stop_on_notice(epoch - 1, step, loss_sum)
        return loss_sum

    def _step(self, net: nn.Module, xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        with self.precision.autocast(self.device):
            loss = self.loss_fn(net(xb), yb)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler.is_enabled():
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def _stop_on_notice(self, done_epochs: int, step: int, loss_sum: torch.Tensor) -> None:
        """A preemption notice arrived: checkpoint this step and stop (notice.stopped exits)."""
        if self.notice is None or self.store is None or not self.notice.pending:
            return
        location = self.store.save(self.saved_state(done_epochs, step, loss_sum.item()), done_epochs, step)
        self.notice.stopped(epoch=done_epochs, step=step, checkpoint=location)

    def _end_epoch(self, data: Split, epoch: int, loss: float, samples_per_s: float) -> None:
        val_loss, accuracy = evaluate(self.model, data.test_x, data.test_y, self.precision, self.device)
        metrics = {"epoch": epoch, "epochs": self.cfg.epochs, "loss": loss, "val_loss": val_loss,
                   "accuracy": accuracy, "samples_per_s": round(samples_per_s, 1),
                   "elapsed_s": round(time.perf_counter() - self.started, 3)}
        self.history.append(metrics)
        if not self.where.is_main:
            return
        location = self.store.save(self.saved_state(epoch), epoch) if self.store else None
        report(**metrics)
        if self.notice is not None and self.notice.pending and epoch < self.cfg.epochs:
            self.notice.stopped(epoch=epoch, step=0, checkpoint=location)

    def result(self, resume: _Resume | None, run_rates: list[float]) -> dict:
        final = self.history[-1] if self.history else {}
        return {"job": self.job.name, "accuracy": final.get("accuracy"), "val_loss": final.get("val_loss"),
                "loss": final.get("loss"), "epochs": self.cfg.epochs, "epochs_run": len(run_rates),
                "resumed_from": resume.epoch if resume is not None else None,
                "samples_per_s": round(sum(run_rates) / len(run_rates), 1) if run_rates else None,
                "elapsed_s": round(time.perf_counter() - self.started, 3), "device": self.device.type,
                "precision": self.precision.name, "world_size": self.where.world_size, "seed": self.cfg.seed,
                "checkpoint": self.store.location if self.store else None}


def _epoch_order(samples: int, seed: int, epoch: int, where: Rank) -> torch.Tensor:
    """The epoch's shuffle of the training samples; with several ranks, this rank's equal shard of it
    (every rank runs the same number of steps)."""
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(epoch_seed(seed, epoch)))
    if where.world_size > 1:
        per_rank = len(order) // where.world_size
        order = order[where.rank::where.world_size][:per_rank]
    return order


def _on_device(data: Split, device: torch.device) -> Split:
    return Split(data.train_x.to(device), data.train_y.to(device), data.test_x.to(device), data.test_y.to(device))


def _train(job: Job, cfg: TrainConfig, where: Rank, device: torch.device,
           notice: PreemptionNotice | None = None) -> dict:
    started = time.perf_counter()
    precision = resolve_precision(cfg.precision, device)
    data = _on_device(job.load_data(), device)
    _set_seed(cfg.seed)
    model = job.build_model().to(device)
    run = _Training(job, cfg, where, device, precision, model,
                    optimizer=torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=job.weight_decay),
                    scaler=torch.amp.GradScaler(device.type, enabled=precision.name == "fp16"),
                    store=open_checkpoints(cfg.checkpoint_dir) if cfg.checkpoint_dir else None,
                    notice=notice, started=started)
    resume = run.resume()
    if where.world_size > 1:
        ids = [device.index] if device.type == "cuda" else None
        run.net = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    first = resume.epoch + 1 if resume is not None else 1
    run_rates = [run.run_epoch(data, epoch, resume) for epoch in range(first, cfg.epochs + 1)]
    return run.result(resume, run_rates)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, precision: Precision,
             device: torch.device) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) on the held-out set."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(x), EVAL_BATCH):
        with precision.autocast(device):
            logits = model(x[i:i + EVAL_BATCH])
        target = y[i:i + EVAL_BATCH]
        loss_sum += nn.functional.cross_entropy(logits.float(), target, reduction="sum").item()
        correct += (logits.argmax(1) == target).sum().item()
    return loss_sum / len(x), correct / len(x)
