"""The kernels one training step launches on a CUDA GPU, recorded on this machine without one.

The model is built and run on fake CPU tensors (no memory, real dtypes), under CPU autocast when the job trains
in fp16/bf16, so the casts, the cached weight casts and the half-precision activations are what autocast makes
them, and backward runs in the dtypes forward left. Where CPU would run something other than CUDA, the record
follows CUDA:
- an RNN module (LSTM, GRU, RNN) is one fused cuDNN op per layer and direction with its FLOPs, bytes and time
  steps (CPU's ATen falls back to ~36 ops per time step that re-read the weights each step);
- the optimizer runs as PyTorch runs it on CUDA: foreach by default, fused or for-loop when the job says, its
  launches counted as multi_tensor_apply makes them;
- ops that CUDA autocast keeps in fp32 (layer norm, softmax, the losses) are counted at fp32 with their casts;
- with fp16, GradScaler's unscale and its sync before the optimizer step.
- scaled dot-product attention is one fused kernel forward and one backward, as flash or memory-efficient
  attention run on CUDA (CPU takes the unfused math path when training with dropout).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from orchestrator.estimate import kernels


@dataclass
class OpCost:
    """`count` calls of one op with the same size: totals of FLOPs and bytes (read + written) over the calls."""

    name: str
    count: int
    flops: float
    bytes: float
    kind: kernels.KernelKind | Literal[""] = ""  # "": a reference profile (gemm with FLOPs, else elementwise)
    dtype: str = ""  # fp32 | bf16 | fp16: the tensors' (the math mode, TF32 or not, is the GPU's: gpu_time.py)
    layout: str = ""  # a convolution's input: nchw | nhwc (channels_last), /dw depthwise; a GEMM's unaligned
    launches: int = 0  # kernel launches over the calls (0: one per call); an RNN's: its time steps
    phase: str = ""  # forward | backward | optimizer
    width: int = 0  # a convolution's implicit GEMM's narrower side (out channels or in channels × taps, per group);
    # a BatchNorm's channels

    @property
    def kernel_launches(self) -> int:
        return self.launches or self.count


_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp32"}


def dtype_name(t) -> str:
    return _DTYPE_NAMES.get(str(t.dtype).removeprefix("torch."), "")


class StepRecorder:
    """Collects OpCosts from a TorchDispatchMode; `phase` is set by whoever drives the step."""

    def __init__(self, autocast_dtype: str | None):
        self.autocast_dtype = autocast_dtype  # None: fp32 training
        self.phase = "forward"
        self._totals: dict[tuple, list[float]] = {}
        self.paused = 0

    def note(self, op: OpCost) -> None:
        key = (op.name, op.kind, op.dtype, op.layout, op.phase or self.phase,
               op.flops / max(op.count, 1), op.bytes / max(op.count, 1), op.launches / max(op.count, 1), op.width)
        tot = self._totals.setdefault(key, [0, 0.0, 0.0, 0])
        tot[0] += op.count
        tot[1] += op.flops
        tot[2] += op.bytes
        tot[3] += op.launches

    def ops(self) -> list[OpCost]:
        out = [OpCost(name, int(c), f, b, kind=kind, dtype=dt, layout=lay, launches=int(la), phase=ph, width=w)
               for (name, kind, dt, lay, ph, _, _, _, w), (c, f, b, la) in self._totals.items()]
        return sorted(out, key=lambda o: (o.phase, o.kind, o.name, -o.flops, -o.bytes))

    def mode(self):
        return _dispatch_mode(self)


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def _tensors(tree) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _float_dtype(tensors) -> str:
    for t in tensors:
        if t.is_floating_point():
            return dtype_name(t)
    return ""


def _attention_flops(name: str, args) -> float:
    q, k, v = args[0], args[1], args[2]
    *lead, q_len, head_dim = q.shape
    batch_heads = 1
    for d in lead:
        batch_heads *= int(d)
    causal = bool(args[4]) if len(args) > 4 and isinstance(args[4], bool) else False
    f = kernels.attention_flops(batch_heads, int(q_len), int(k.shape[-2]), int(head_dim), int(v.shape[-1]), causal)
    return f * 2.5 if name.endswith("_backward") else f  # backward: five GEMMs of forward's two's size


def _dispatch_mode(rec: StepRecorder):
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.overloadpacket.__name__
            if rec.paused or name in kernels.PROFILER_OPS:
                return out
            if name in kernels.FREE_OPS:
                rec.note(OpCost(name="(views and allocations)", count=1, flops=0.0, bytes=0.0, kind="host",
                                launches=0))
            else:
                rec.note(_op_cost(rec, func, name, args, kwargs, out))
            return out

    return _Mode()


def _op_cost(rec: StepRecorder, func, name: str, args, kwargs, out) -> OpCost:
    """One aten op as the kernel CUDA runs for it: class, FLOPs, bytes read and written, launches, dtype."""
    from torch.utils.flop_counter import flop_registry

    ins, outs = _tensors((args, kwargs)), _tensors(out)
    moved = sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in outs)
    kind = kernels.kind_of(name)
    launches = 1
    if kind == "optimizer":
        lists = [a for a in args if isinstance(a, (list, tuple)) and a and hasattr(a[0], "numel")]
        if lists:
            launches = kernels.foreach_launches([int(t.numel()) for t in lists[0]], len(lists))
            if not outs:  # in place over lists: what it reads it writes back
                moved += sum(_nbytes(t) for t in lists[0])
    if kind == "attention":
        flops = _attention_flops(name, args)
    elif name in ("convolution", "convolution_backward"):
        flops = _conv_flops(name, args, outs)
    else:
        counter = flop_registry.get(func.overloadpacket)
        flops = float(counter(*args, **kwargs, out_val=out)) if counter is not None else 0.0
    layout, width = "", 0
    if name in ("convolution", "convolution_backward") and args[0].dim() == 4:
        x, weight = (args[0], args[1]) if name == "convolution" else (args[1], args[2])
        groups = int(args[8] if name == "convolution" else args[9])
        layout = _conv_layout(x, weight, groups)
        width = _conv_width(weight, groups)
    elif kind == "gemm":
        layout = kernels.gemm_alignment(ins)
    elif name in kernels.POOL_OPS:
        layout = kernels.POOL
    elif kind == "norm" and "batch_norm" in name:
        layout, width = "batch", int(args[0].shape[1]) if args[0].dim() > 1 else 0
    dtype = _float_dtype(ins) or _float_dtype(outs)
    if rec.autocast_dtype and name in kernels.CUDA_AUTOCAST_FP32_OPS and dtype in ("bf16", "fp16"):
        moved = _as_cuda_autocast_fp32(rec, ins, outs, moved)
        dtype = "fp32"
    return OpCost(name=name, count=1, flops=flops, bytes=float(moved), kind=kind, dtype=dtype, layout=layout,
                  launches=launches, width=width)


def _conv_layout(x, weight, groups: int) -> str:
    """A 2-d convolution's layout (channels_last: nhwc), marked when its input has few channels (an RGB stem) or
    each group one channel (depthwise: cuDNN's are memory-bound kernels of their own)."""
    import torch

    from orchestrator.estimate.gpu_calibration import conv_layout

    def nhwc(t) -> bool:
        return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()

    layout = "nhwc" if nhwc(x) or nhwc(weight) else "nchw"
    if groups > 1 and int(weight.shape[1]) == 1:
        return layout + kernels.DEPTHWISE
    return conv_layout(layout, int(x.shape[1]))


def _conv_width(weight, groups: int) -> int:
    """The narrower side of a convolution's implicit GEMM (gpu_calibration.conv_width)."""
    from orchestrator.estimate.gpu_calibration import conv_width

    taps = 1
    for d in weight.shape[2:]:
        taps *= int(d)
    return conv_width(int(weight.shape[1]) * groups, int(weight.shape[0]), taps, groups)


def _conv_flops(name: str, args, outs) -> float:
    """A convolution's FLOPs, groups counted (torch's counter takes a grouped backward for a dense one):
    2 x output elements x input channels per group x kernel size, once forward, once per gradient backward."""
    if name == "convolution":
        weight, out, mask = args[1], outs[0], (True,)
    else:
        weight, out, mask = args[2], args[0], tuple(args[10][:2])
    taps = 1
    for d in weight.shape[1:]:
        taps *= int(d)
    return 2.0 * out.numel() * taps * sum(bool(m) for m in mask)

def _as_cuda_autocast_fp32(rec: StepRecorder, ins, outs, moved: int) -> int:
    """CPU autocast ran this op in half precision, CUDA's runs it in fp32: its half inputs are cast up (a kernel
    each: read 2, write 4 bytes an element), it reads and writes fp32, and its consumer casts the output back."""
    halves_in = [t for t in ins if t.is_floating_point() and t.element_size() == 2]
    halves_out = [t for t in outs if t.is_floating_point() and t.element_size() == 2]
    for t in halves_in + halves_out:
        rec.note(OpCost(name="_to_copy (autocast fp32)", count=1, flops=0.0, bytes=3.0 * _nbytes(t),
                        kind="elementwise", dtype="fp32"))
    return moved + sum(_nbytes(t) for t in halves_in + halves_out)


# --- fake parameters, GradScaler ------------------------------------------------------------------

def to_fake_cpu(model, fake) -> None:
    """Give the model fake CPU parameters and buffers of the same shapes: CPU autocast applies to them, and nothing
    is allocated or computed (tied parameters stay tied)."""
    import torch

    made: dict[int, torch.Tensor] = {}

    def fake_of(t, parameter: bool):
        if id(t) not in made:
            with fake:
                new = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
            made[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) if parameter else new
        return made[id(t)]

    for m in model.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                m._parameters[name] = fake_of(p, True)
        for name, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[name] = fake_of(b, False)
        if isinstance(m, torch.nn.RNNBase):
            m._init_flat_weights()


def grad_scaler_ops(rec, params) -> None:
    """fp16 training's GradScaler (torch.amp.GradScaler, PyTorch's recipe): the loss scaled, the gradients
    unscaled and checked for inf/NaN in one foreach pass, and a sync on found_inf before the optimizer steps."""
    grads = sum(4.0 * p.numel() for p in params)
    rec.note(OpCost(name="mul (loss scale)", count=1, flops=0.0, bytes=8.0, kind="elementwise", dtype="fp32",
                    phase="forward"))
    rec.note(OpCost(name="_amp_foreach_non_finite_check_and_unscale_", count=1, flops=0.0, bytes=2 * grads,
                    kind="optimizer", dtype="fp32", launches=kernels.foreach_launches([p.numel() for p in params], 1)))
    rec.note(OpCost(name=SYNC_OP, count=1, flops=0.0, bytes=0.0, kind="host", launches=0))
    rec.note(OpCost(name="_amp_update_scale_", count=1, flops=0.0, bytes=16.0, kind="elementwise", dtype="fp32"))


# the host waits for the GPU here: what the host dispatches after it cannot overlap what the GPU ran before
SYNC_OP = "(sync: GradScaler reads found_inf)"


# --- cuDNN's fused RNN -------------------------------------------------------------------------

def fuse_rnns(model, rec: StepRecorder) -> None:
    """Make every RNN module of `model` run as one recorded cuDNN op per layer and direction (for the profile)."""
    import torch.nn as nn

    for m in model.modules():
        if isinstance(m, nn.RNNBase) and m.mode in kernels.RNN_GATES:
            m.forward = _fused_forward(m, rec)  # an instance attribute: the profile's model only


def _fused_forward(m, rec: StepRecorder):
    import torch
    from torch.nn.utils.rnn import PackedSequence

    original = m.forward
    gates = kernels.RNN_GATES[m.mode]
    dirs = 2 if m.bidirectional else 1
    out_size = m.proj_size or m.hidden_size

    class FusedRnn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *weights):
            batched = x.dim() == 3
            b, s = (int(x.shape[0]), int(x.shape[1])) if batched and m.batch_first else \
                (int(x.shape[1]), int(x.shape[0])) if batched else (1, int(x.shape[0]))
            flops, moved, in_size = 0.0, 0.0, m.input_size
            el = 2 if rec.autocast_dtype else x.element_size()
            for _ in range(m.num_layers):
                per_dir = kernels.rnn_forward_flops(m.mode, b, s, in_size, m.hidden_size)
                if m.proj_size:
                    per_dir += 2.0 * b * s * m.hidden_size * m.proj_size
                flops += per_dir * dirs
                weight_elems = gates * m.hidden_size * (in_size + out_size) + gates * m.hidden_size * 2
                moved += el * (b * s * (in_size + out_size * dirs + gates * m.hidden_size * dirs)
                               + weight_elems * dirs)
                in_size = out_size * dirs
            ctx.shape = (b, s)
            ctx.cost = (flops, moved)
            ctx.input_shapes = [t.shape for t in (x, *weights)]
            # under autocast, cuDNN's RNN casts its input and weights to half and re-flattens the weights on every
            # call (ATen/native/cudnn/AutocastRNN.cpp: _cudnn_rnn_cast_reflatten)
            dtype = rec.autocast_dtype or dtype_name(x)
            if rec.autocast_dtype:
                cast = sum(_nbytes(w) for w in weights) * 1.5 + _nbytes(x) * 1.5
                rec.note(OpCost(name="_cudnn_rnn_cast_reflatten", count=1, flops=0.0, bytes=cast,
                                kind="elementwise", dtype=dtype, launches=len(weights) + 1, phase="forward"))
            ctx.dtype = dtype
            n, steps = m.num_layers * dirs, s * m.num_layers * dirs
            rec.note(OpCost(name=f"cudnn_rnn ({m.mode})", count=n, flops=flops, bytes=moved, kind="rnn",
                            dtype=dtype, launches=steps, phase="forward"))
            # cuDNN keeps every step's gates for backward (its reserve space)
            reserve = x.new_empty((b * s * gates * m.hidden_size * dirs * m.num_layers,))
            ctx.save_for_backward(reserve)
            out_shape = (b, s, out_size * dirs) if m.batch_first else (s, b, out_size * dirs)
            out = x.new_empty(out_shape if batched else (s, out_size * dirs))
            h_shape = (m.num_layers * dirs, b, out_size) if batched else (m.num_layers * dirs, out_size)
            c_shape = (m.num_layers * dirs, b, m.hidden_size) if batched else (m.num_layers * dirs, m.hidden_size)
            return out, x.new_empty(h_shape), x.new_empty(c_shape)

        @staticmethod
        def backward(ctx, *grads):
            flops, moved = ctx.cost
            n = m.num_layers * dirs
            b, s = ctx.shape
            # data and weight gradients: twice forward's GEMMs, the reserve read back, the grads written
            rec.note(OpCost(name=f"cudnn_rnn_backward ({m.mode})", count=n, flops=2 * flops, bytes=2 * moved,
                            kind="rnn", dtype=ctx.dtype, launches=2 * s * n, phase="backward"))
            (reserve,) = ctx.saved_tensors
            return tuple(reserve.new_empty(shape) for shape in ctx.input_shapes)

    def forward(x, hx=None):
        if isinstance(x, PackedSequence):
            return original(x, hx)
        weights = [w for w in (getattr(m, n) for n in m._flat_weights_names) if w is not None]
        rec.paused += 1  # the Function's own allocations are not kernels
        try:
            out, h, c = FusedRnn.apply(x, *weights)
        finally:
            rec.paused -= 1
        return out, ((h, c) if m.mode == "LSTM" else h)

    return forward


# --- fused attention ----------------------------------------------------------------------------

@contextmanager
def fused_attention(rec: StepRecorder):
    """While profiling, F.scaled_dot_product_attention records as CUDA's fused kernels."""
    import torch
    import torch.nn.functional as F

    class FusedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal: bool):
            bh = 1
            for d in q.shape[:-2]:
                bh *= int(d)
            flops = kernels.attention_flops(bh, int(q.shape[-2]), int(k.shape[-2]), int(q.shape[-1]),
                                            int(v.shape[-1]), causal)
            out = q.new_empty((*q.shape[:-1], v.shape[-1]))
            moved = float(sum(_nbytes(t) for t in (q, k, v, out)))
            ctx.cost, ctx.dtype = (flops, moved), dtype_name(q)
            ctx.save_for_backward(q, k, v, out)
            rec.note(OpCost(name="scaled_dot_product_attention", count=1, flops=flops, bytes=moved,
                            kind="attention", dtype=ctx.dtype, phase="forward"))
            return out

        @staticmethod
        def backward(ctx, grad):
            flops, moved = ctx.cost
            q, k, v, _ = ctx.saved_tensors
            # five GEMMs of forward's two's size; reads q, k, v, out, dout, writes dq, dk, dv
            rec.note(OpCost(name="scaled_dot_product_attention_backward", count=1, flops=2.5 * flops,
                            bytes=2 * moved, kind="attention", dtype=ctx.dtype, phase="backward"))
            return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), None

    original = F.scaled_dot_product_attention

    def fused(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if enable_gqa and k.shape[-3] != q.shape[-3]:  # grouped-query: each key/value head serves several
            reps = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(reps, -3), v.repeat_interleave(reps, -3)
        rec.paused += 1
        try:
            return FusedAttention.apply(q, k, v, bool(is_causal))
        finally:
            rec.paused -= 1

    # the module attribute, which nn.MultiheadAttention and Hugging Face models call through, for this profile
    F.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
