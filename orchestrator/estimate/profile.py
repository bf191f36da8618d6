"""WorkloadProfile: what one training step of a job costs, measured once and cached.

The kernels a step launches on a CUDA GPU (their class, FLOPs, bytes at the dtype used, launches) are recorded
by step_ops.py on fake tensors, so a model too big for this machine is still profiled in a second. Activation
memory is the size of the tensors autograd saves for backward. The local step time is measured with a few real
training steps on this machine's CUDA GPU or CPU (skipped on the CPU when the roofline says one step is too long).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.errors import SpecError
from orchestrator.paths import profiles_dir
from orchestrator.estimate.step_ops import SYNC_OP, OpCost

__all__ = ["OpCost", "SYNC_OP", "WorkloadProfile", "measure", "profile_now", "cached_profile"]

PROFILE_VERSION = 8
# the local measurement is skipped (the roofline is used instead) when the CPU roofline predicts a
# step longer than this, or the model's training state is bigger than this: it would take long and
# crowd the machine
MAX_LOCAL_STEP_SECONDS = 2.0
MAX_LOCAL_MEASURE_BYTES = 2e9
# the built-in jobs train on CPU with one torch thread (jobs/train.py --cpu-threads 1): time steps alike
LOCAL_CPU_THREADS = 1
TOO_BIG_NOTE = "the model is too big to time on this machine: the local estimate comes from the CPU roofline"
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}
OPTIMIZER_STATE_PER_PARAM = {"adam": 2, "adamw": 2, "sgd": 1}  # fp32 values per parameter


@dataclass
class WorkloadProfile:
    model: str
    model_family: str
    precision: str
    batch_size: int
    steps_per_epoch: int
    epochs: int
    params: int
    weight_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    activation_bytes: float
    batch_input_bytes: float
    flops_per_step: float
    ops: list[OpCost] = field(default_factory=list)
    param_tensors: int = 0  # what the optimizer and autograd loop over on the host
    # what the job asks of PyTorch beyond the defaults (workload.tf32, memory_format, optimizer_impl)
    tf32: bool = False
    memory_format: str = "contiguous"
    optimizer_impl: str = "foreach"
    gpu_name: str = ""  # the local CUDA GPU local_step_seconds["cuda"] was measured on
    local_step_seconds: dict[str, float] = field(default_factory=dict)
    # that GPU's busy seconds per step by kernel class (kernel_times.py), to scale each class to other GPUs
    local_gpu_kinds: dict[str, float] = field(default_factory=dict)
    local_threads: int = 0
    source: str = "measured"  # measured | reference | probe (a timed local run of the job)
    note: str = ""

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def state_bytes(self) -> float:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> WorkloadProfile:
        d = dict(d)
        d["ops"] = [OpCost(**o) for o in d.get("ops", [])]
        return cls(**d)


def workload_hash(workload) -> str:
    # unset fields left out: a model: workload keeps the hash (and cached profile) it had before hf: existed
    blob = json.dumps({"v": PROFILE_VERSION, "w": workload.model_dump(mode="json", exclude_none=True)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cached_profile(workload, *, measure_local: bool = True, path=None) -> WorkloadProfile | None:
    """The stored profile when measure() would not measure again (else None: the next plan measures)."""
    path = path or profiles_dir() / f"{workload_hash(workload)}.json"
    if not path.exists():
        return None
    try:
        cached = WorkloadProfile.from_json(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError):
        return None
    if cached.local_step_seconds or not measure_local or TOO_BIG_NOTE in cached.note:
        return cached
    return None


def measure(workload, *, measure_local: bool = True, refresh: bool = False) -> WorkloadProfile:
    """Profile one training step of `workload` (a spec.Workload); cached under $DLRUN_HOME/profiles/."""
    path = profiles_dir() / f"{workload_hash(workload)}.json"
    cached = None if refresh else cached_profile(workload, measure_local=measure_local)
    if cached is not None:
        return cached
    prof = profile_now(workload, measure_local=measure_local)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(prof.to_json()))
    tmp.replace(path)
    return prof


def profile_now(workload, *, measure_local: bool = True) -> WorkloadProfile:
    """The static profile and, when small enough, the measured local step (no cache)."""
    try:
        return _profile_now(workload, measure_local)
    except Exception as e:
        if workload.hf is None or isinstance(e, SpecError):
            raise
        # transformers rejected the config while running it (a missing token id, a shape it cannot take)
        first = (str(e).splitlines() or [""])[0]
        raise SpecError(f"workload.hf: {workload.label.removeprefix('hf:')} failed while profiling "
                        f"({type(e).__name__}: {first}); check the config and workload.seq_len") from None


def _profile_now(workload, measure_local: bool) -> WorkloadProfile:
    prof = _static_profile(workload)
    if measure_local:
        _measure_on_local_gpu(workload, prof)
        from orchestrator.estimate.estimator import cpu_roofline_step_seconds
        from orchestrator.planning.probe import cpu_probe

        small = prof.state_bytes + prof.activation_bytes <= MAX_LOCAL_MEASURE_BYTES
        if small and cpu_roofline_step_seconds(prof, cpu_probe()) <= MAX_LOCAL_STEP_SECONDS:
            prof.local_step_seconds["cpu"] = measure_local_step_robust(workload, "cpu")
            prof.local_threads = LOCAL_CPU_THREADS
        else:
            prof.note = "; ".join(n for n in (prof.note, TOO_BIG_NOTE) if n)
    return prof


def _measure_on_local_gpu(workload, prof: WorkloadProfile) -> None:
    """Time real steps on this machine's CUDA GPU when dlrun's torch sees one: the local GPU's estimate, and
    the base the other GPUs are scaled from. A model too big for it is left to the calibrated model."""
    from infra.local.gpus import local_gpu_name

    name = local_gpu_name()
    if name is None:
        return
    import torch

    if not torch.cuda.is_available():
        prof.note = (f"this machine's {name} is not timed: dlrun's torch has no CUDA (torch "
                     f"{torch.__version__}); its estimate comes from the GPU table")
        return
    try:
        prof.local_step_seconds["cuda"] = measure_local_step_robust(workload, "cuda")
        prof.gpu_name = name
        prof.local_gpu_kinds = measure_local_kinds(workload, "cuda")
    except torch.cuda.OutOfMemoryError:
        prof.note = f"the model does not fit this machine's {name} to time it: its estimate is the GPU model's"
    finally:
        torch.cuda.empty_cache()


# --- building the model and one batch ----------------------------------------------------------

def build_model(workload, device: str = "cpu"):
    import torch

    if workload.hf is not None:
        from orchestrator.estimate.hf_workload import build_training_model, resolve_config

        config = resolve_config(workload.hf, Path.cwd(), "workload")  # a str only where no job file was read
        with torch.device(device):
            return build_training_model(config, workload.seq_len)
    module_name, _, attr = workload.model.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise SpecError(f"workload.model: cannot import '{workload.model}' ({e}); check module:callable") from None
    with torch.device(device):
        try:
            return factory(**workload.model_kwargs)
        except TypeError as e:
            raise SpecError(f"workload.model_kwargs: {workload.model} rejected them ({e})") from None


def make_batch(workload, device: str = "cpu", batch_size: int | None = None):
    import torch

    b = batch_size or workload.batch_size
    shape = (b, *workload.sample_shape)
    if workload.hf is not None or workload.input_dtype == "long":
        high = int((workload.hf if isinstance(workload.hf, dict) else workload.model_kwargs).get("vocab_size", 2))
        x = torch.randint(0, max(high, 1), shape, device=device) if device != "meta" else \
            torch.empty(shape, dtype=torch.long, device=device)
    else:
        x = torch.randn(shape, device=device)
    y = torch.randint(0, workload.num_classes, (b,), device=device) if device != "meta" else \
        torch.empty((b,), dtype=torch.long, device=device)
    return x, y


def loss_of(out, y, num_classes: int):
    import torch.nn.functional as F

    if isinstance(out, (tuple, list)):
        out = out[0]
    if out.dim() == 0:  # the model computed its own loss (a Hugging Face head given labels)
        return out
    if out.dim() == 2 and out.shape[1] == num_classes:
        return F.cross_entropy(out, y)
    return out.float().square().mean()


def make_optimizer(workload, params, impl: str | None = None):
    """The job's optimizer; `impl` (foreach | fused | for-loop) as PyTorch runs it on CUDA, None: torch's choice."""
    import torch

    kw = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}.get(impl or "", {})
    lr = 1e-3
    if workload.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, **kw)
    return {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[workload.optimizer](params, lr=lr, **kw)


def model_family(model) -> str:
    """A coarse architecture family, the key (with the GPU) for learning from finished runs."""
    import torch.nn as nn

    if hasattr(model, "dlrun_family"):  # a model dlrun built itself (hf_workload) says what it is
        return model.dlrun_family
    kinds = {type(m) for m in model.modules()}
    if any(issubclass(k, (nn.MultiheadAttention, nn.TransformerEncoderLayer)) for k in kinds):
        return "attention"
    if any(issubclass(k, nn.RNNBase) for k in kinds):
        return "recurrent"
    if any(issubclass(k, nn.modules.conv._ConvNd) for k in kinds):
        return "conv"
    return "mlp"


# --- the static profile (fake tensors: what CUDA would run, no memory) ----------------------------

def _static_profile(workload) -> WorkloadProfile:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from orchestrator.estimate.step_ops import StepRecorder, fuse_rnns, fused_attention, grad_scaler_ops, to_fake_cpu

    tf32, memory_format, impl = workload.math
    half = workload.precision if workload.precision != "fp32" else None
    try:
        model = build_model(workload, "meta")
    except SpecError:
        raise
    except Exception:  # some factories cannot build on meta (e.g. they load data): the CPU
        model = build_model(workload, "cpu")
    fake = FakeTensorMode()
    to_fake_cpu(model, fake)
    rec = StepRecorder(half)
    saved: dict[int, int] = {}

    def pack(t):
        saved.setdefault(id(t), t.numel() * t.element_size())
        return t

    with fake:
        model.train()
        x, y = make_batch(workload, "cpu")
        if memory_format == "channels_last":  # as model.to(memory_format=...), which fake tensors cannot swap
            for p in model.parameters():
                if p.dim() == 4:
                    p.data = p.data.contiguous(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
        fuse_rnns(model, rec)
        params = [p for p in model.parameters() if p.requires_grad]
        with rec.mode(), fused_attention(rec):
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with torch.autocast("cpu", dtype=getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}.get(
                        half or "", "bfloat16")), enabled=half is not None):
                    loss = loss_of(model(x), y, workload.num_classes)
            rec.phase = "backward"
            loss.backward()
            rec.phase = "optimizer"
            if half == "fp16":
                grad_scaler_ops(rec, params)
            make_optimizer(workload, params, impl).step()
    ops = rec.ops()
    n_params = sum(p.numel() for p in params)
    return WorkloadProfile(
        model=workload.label, model_family=model_family(model), precision=workload.precision,
        batch_size=workload.batch_size, steps_per_epoch=workload.steps_per_epoch, epochs=workload.epochs,
        params=int(n_params),
        weight_bytes=4.0 * n_params, grad_bytes=4.0 * n_params,
        optimizer_bytes=4.0 * n_params * OPTIMIZER_STATE_PER_PARAM[workload.optimizer],
        activation_bytes=float(sum(saved.values())),
        batch_input_bytes=float(x.numel() * x.element_size() + y.numel() * y.element_size()),
        flops_per_step=float(sum(o.flops for o in ops)), ops=ops, param_tensors=len(params),
        tf32=tf32, memory_format=memory_format, optimizer_impl=impl,
    )


# --- measured on this machine -------------------------------------------------------------------

def measure_local_step(workload, device: str = "cpu", *, min_steps: int = 8, warmup_steps: int = 3,
                       warmup_seconds: float = 0.3, measure_seconds: float = 0.6, max_steps: int = 60,
                       quantile: float = 0.5) -> float:
    """Median seconds of a real training step on this machine (synthetic data of the right shape).

    The first steps of a fresh model pay one-time costs (kernel selection, thread pool start), so
    warm-up runs for a number of steps and a minimum time before steps are timed.
    """
    step = _local_training_step(workload, device)
    i, start = 0, time.perf_counter()
    while i < warmup_steps or (time.perf_counter() - start < warmup_seconds and i < max_steps):
        step(i * workload.batch_size)
        i += 1
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_steps or (time.perf_counter() - start < measure_seconds and len(times) < max_steps):
        times.append(step((i + len(times)) * workload.batch_size))
    times.sort()
    return times[min(len(times) - 1, int(len(times) * quantile))]


def measure_local_kinds(workload, device: str = "cuda", warmup_steps: int = 3, steps: int = 3) -> dict[str, float]:
    """Seconds per step by kernel class of a real training step here (kernel_times.py: the kernels' device
    time on a GPU, the ops' CPU time on a CPU)."""
    import torch

    from orchestrator.estimate.kernel_times import step_time_by_kind

    tf32_before = torch.backends.cuda.matmul.allow_tf32
    try:
        step, calls = _local_training_step(workload, device), iter(range(warmup_steps + steps))
        for _ in range(warmup_steps):
            step(next(calls) * workload.batch_size)
        return step_time_by_kind(lambda: step(next(calls) * workload.batch_size), steps)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before


def _local_training_step(workload, device: str):
    """The job's training step on this machine's `device`, as a callable(sample index) -> its seconds."""
    import torch

    torch.manual_seed(0)
    tf32, memory_format, impl = workload.math
    cuda = device.startswith("cuda")
    model = build_model(workload, device)
    model.train()
    n = workload.batch_size * min(8, workload.steps_per_epoch)
    xs, ys = make_batch(workload, device, batch_size=n)
    if memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)  # pyright: ignore[reportCallIssue]
        xs = xs.contiguous(memory_format=torch.channels_last) if xs.dim() == 4 else xs
    opt = make_optimizer(workload, list(model.parameters()), impl if cuda else None)
    autocast = workload.precision != "fp32" and cuda
    dtype = torch.float16 if workload.precision == "fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=cuda and workload.precision == "fp16")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32  # restored by measure_local_step_robust

    def step(i: int) -> float:  # index into the data like the built-in jobs' loop
        t0 = time.perf_counter()
        idx = order[i % n:i % n + workload.batch_size]
        xb, yb = xs[idx], ys[idx]
        with torch.autocast(device_type=device.split(":")[0], dtype=dtype, enabled=autocast):
            loss = loss_of(model(xb), yb, workload.num_classes)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sync()
        return time.perf_counter() - t0

    order = torch.randperm(n, device=device)
    return step


def measure_local_step_robust(workload, device: str = "cpu", rounds: int = 2) -> float:
    """The fastest of a few rounds' lower quintile: on a shared machine (2 cores, torch using both) a
    burst of load from other processes slows steps 10-50×; it never speeds them up."""
    import torch

    before = torch.get_num_threads()
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    if device == "cpu":
        torch.set_num_threads(LOCAL_CPU_THREADS)
    try:
        return min(measure_local_step(workload, device, quantile=0.2) for _ in range(rounds))
    finally:
        torch.set_num_threads(before)
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
