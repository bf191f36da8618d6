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

from jobs.checkpoint import CHECKPOINT_ENV, CheckpointError, open_checkpoints
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


def _load_latest(store, where: Rank, device: torch.device) -> dict | None:
    """The newest checkpoint; in a data-parallel group rank 0 reads it and sends it to all (the
    other ranks may sit on nodes that cannot see a local checkpoint directory)."""
    state = store.load_latest() if store is not None and where.is_main else None
    if where.world_size > 1:
        box = [state]
        torch.distributed.broadcast_object_list(box, src=0,
                                                device=device if device.type == "cuda" else None)
        state = box[0]
    return state


def _train(job: Job, cfg: TrainConfig, where: Rank, device: torch.device,
           notice: PreemptionNotice | None = None) -> dict:
    started = time.perf_counter()
    precision = resolve_precision(cfg.precision, device)

    data = job.load_data()
    train_x, train_y = data.train_x.to(device), data.train_y.to(device)
    test_x, test_y = data.test_x.to(device), data.test_y.to(device)

    _set_seed(cfg.seed)
    model = job.build_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=job.weight_decay)
    scaler = torch.amp.GradScaler(device.type, enabled=precision.name == "fp16")

    store = open_checkpoints(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    history: list[dict] = []
    start_epoch, resume_step = 0, 0
    state = _load_latest(store, where, device)
    if state is not None:
        if state.get("job") != job.name:
            raise CheckpointError(f"the checkpoint at {store.location} belongs to job "
                                  f"{state.get('job')!r}, not {job.name!r}: use another "
                                  "--checkpoint-dir")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        # the precision may differ after a move (fp16 on a T4 -> bf16 on an A100)
        if state["scaler"] and scaler.is_enabled():
            scaler.load_state_dict(state["scaler"])
        _restore_rng(state["rng"])
        history = list(state["history"])
        start_epoch = int(state["epoch"])
        resume_step = int(state.get("step", 0))  # steps of epoch start_epoch+1 done (a notice stopped it)
        if where.is_main:
            report_event("resumed", epoch=start_epoch, step=resume_step, checkpoint=store.location)
    if where.world_size > 1:
        ids = [device.index] if device.type == "cuda" else None
        net: nn.Module = nn.parallel.DistributedDataParallel(model, device_ids=ids)
    else:
        net = model

    loss_fn = nn.CrossEntropyLoss()
    run_rates = []

    def saved_state(done_epochs: int, step: int = 0, loss_so_far: float = 0.0) -> dict:
        return {"job": job.name, "epoch": done_epochs, "step": step, "loss_sum": loss_so_far,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict(),
                "rng": _rng_state(), "history": history, "seed": cfg.seed}

    for epoch in range(start_epoch + 1, cfg.epochs + 1):
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(
            epoch_seed(cfg.seed, epoch))).to(device)
        if where.world_size > 1:  # equal shards, so every rank runs the same number of steps
            per_rank = len(order) // where.world_size
            order = order[where.rank::where.world_size][:per_rank]
        skip = resume_step if epoch == start_epoch + 1 else 0
        if not skip:  # resuming mid-epoch: the checkpoint's RNG state is where this epoch left it
            _set_seed(epoch_seed(cfg.seed, epoch, where.rank))

        net.train()
        loss_sum = torch.full((), float(state.get("loss_sum", 0.0)) if skip else 0.0, device=device)
        tick = time.perf_counter()
        batches = range(0, len(order), cfg.batch_size)
        for step, i in enumerate(batches, start=1):
            if step <= skip:
                continue
            idx = order[i:i + cfg.batch_size]
            xb, yb = train_x[idx], train_y[idx]
            with precision.autocast(device):
                loss = loss_fn(net(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            if scaler.is_enabled():
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            loss_sum += loss.detach() * len(idx)
            if notice is not None and notice.pending and step < len(batches):
                location = store.save(saved_state(epoch - 1, step, loss_sum.item()), epoch - 1, step)
                notice.stopped(epoch=epoch - 1, step=step, checkpoint=location)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_seconds = time.perf_counter() - tick
        samples_per_s = (len(order) - min(skip * cfg.batch_size, len(order))) * where.world_size / train_seconds
        run_rates.append(samples_per_s)

        val_loss, accuracy = evaluate(model, test_x, test_y, precision, device)
        metrics = {"epoch": epoch, "epochs": cfg.epochs,
                   "loss": loss_sum.item() / len(order), "val_loss": val_loss,
                   "accuracy": accuracy, "samples_per_s": round(samples_per_s, 1),
                   "elapsed_s": round(time.perf_counter() - started, 3)}
        history.append(metrics)
        if where.is_main:
            location = store.save(saved_state(epoch), epoch) if store else None
            report(**metrics)
            if notice is not None and notice.pending and epoch < cfg.epochs:
                notice.stopped(epoch=epoch, step=0, checkpoint=location)

    final = history[-1] if history else {}
    return {"job": job.name, "accuracy": final.get("accuracy"), "val_loss": final.get("val_loss"),
            "loss": final.get("loss"), "epochs": cfg.epochs, "epochs_run": len(run_rates),
            "resumed_from": start_epoch if state is not None else None,
            "samples_per_s": round(sum(run_rates) / len(run_rates), 1) if run_rates else None,
            "elapsed_s": round(time.perf_counter() - started, 3), "device": device.type,
            "precision": precision.name, "world_size": where.world_size, "seed": cfg.seed,
            "checkpoint": store.location if store else None}


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
