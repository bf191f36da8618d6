"""What CUDA runs for an aten op of a training step: its kernel class, and the launch facts PyTorch decides.

Stdlib only: the estimator imports this on every plan. The op recorder (step_ops.py) uses it to label what it
sees; the GPU model (gpu_time.py) prices each label with the calibration of its class (gpu_calibration.py).
"""
from __future__ import annotations

from typing import Literal

# "host": no kernel (views, allocation): dispatch time only
KernelKind = Literal["gemm", "conv", "attention", "rnn", "elementwise", "norm", "optimizer", "host"]
COMPUTE_KINDS: tuple[KernelKind, ...] = ("gemm", "conv", "attention", "rnn")  # priced by FLOPs; the rest by bytes

GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "_scaled_mm", "addmv", "mv", "dot"}
CONV_OPS = {"convolution", "_convolution", "convolution_backward", "cudnn_convolution", "conv2d", "conv1d",
            "conv3d", "mkldnn_convolution", "_slow_conv2d_forward", "_slow_conv2d_backward", "_conv_depthwise2d",
            "conv_depthwise3d", "cudnn_convolution_transpose", "convolution_overrideable"}
# the fused attention kernels; on CPU profiling sees the flash-for-CPU op, on CUDA flash / efficient / cuDNN run
ATTENTION_OPS = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
                 "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
                 "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
                 "_flash_attention_forward", "_flash_attention_backward", "_efficient_attention_forward",
                 "_efficient_attention_backward", "_cudnn_attention_forward", "_cudnn_attention_backward"}
# cuDNN's fused RNN (and ROCm's): what a profiled CUDA step shows for nn.LSTM / nn.GRU / nn.RNN, forward and backward
RNN_OPS = {"_cudnn_rnn", "_cudnn_rnn_backward", "miopen_rnn", "miopen_rnn_backward", "_thnn_fused_lstm_cell",
           "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward"}
NORM_OPS = {"native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
            "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training", "cudnn_batch_norm",
            "cudnn_batch_norm_backward", "native_layer_norm", "native_layer_norm_backward", "native_group_norm",
            "native_group_norm_backward", "_softmax", "_softmax_backward_data", "_log_softmax",
            "_log_softmax_backward_data", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
            "nll_loss2d_backward", "sum", "mean", "var_mean", "amax", "max", "logsumexp", "norm",
            "linalg_vector_norm", "_fused_rms_norm", "_fused_rms_norm_backward", "embedding_dense_backward"}
# what autocast on CUDA runs in fp32 whatever its inputs (PyTorch's "CUDA ops that can autocast to float32",
# docs.pytorch.org/docs/stable/amp.html), as aten sees them, with their backward; CPU autocast keeps some in bf16
CUDA_AUTOCAST_FP32_OPS = {"native_layer_norm", "native_layer_norm_backward", "native_group_norm",
                          "native_group_norm_backward", "_softmax", "_softmax_backward_data", "_log_softmax",
                          "_log_softmax_backward_data", "nll_loss_forward", "nll_loss_backward", "logsumexp",
                          "exp", "log", "pow", "rsqrt", "mse_loss", "mse_loss_backward", "l1_loss",
                          "binary_cross_entropy_with_logits", "_fused_rms_norm", "_fused_rms_norm_backward",
                          "cumsum", "prod", "norm", "linalg_vector_norm", "softplus", "reciprocal"}
# metadata and allocation: no kernel on the GPU, a few microseconds of dispatch at most
FREE_OPS = {"detach", "view", "_unsafe_view", "t", "transpose", "expand", "reshape", "permute", "unsqueeze",
            "squeeze", "as_strided", "slice", "select", "alias", "split", "split_with_sizes", "unbind",
            "lift_fresh", "lift_fresh_copy", "empty", "empty_like", "new_empty", "new_empty_strided",
            "empty_strided", "_reshape_alias", "device", "_record_function_enter_new", "_record_function_exit",
            "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride", "sym_numel",
            "set_", "resize_", "_has_compatible_shallow_copy_type", "zeros", "ones", "zeros_like", "ones_like",
            "new_zeros", "new_ones", "scalar_tensor", "unfold", "diagonal", "narrow", "view_as",
            "expand_as", "t_", "transpose_", "squeeze_", "unsqueeze_"}

# what fake tensors and the profiler call themselves: no part of the user's step
PROFILER_OPS = {"device", "_record_function_enter_new", "_record_function_exit", "lift_fresh", "sym_size",
                "sym_stride", "sym_numel", "is_same_size", "_has_compatible_shallow_copy_type"}

# multi_tensor_apply (ATen/native/cuda/MultiTensorApply.cuh): per launch at most this many tensors for
# a foreach op over `depth` lists, and at most 320 blocks of 65,536 elements
_MAX_TENSORS_BY_DEPTH = {1: 110, 2: 64, 3: 48, 4: 36, 5: 30}
_MAX_BLOCKS, _CHUNK = 320, 65536


def kind_of(op: str) -> KernelKind:
    if op in GEMM_OPS:
        return "gemm"
    if op in CONV_OPS:
        return "conv"
    if op in ATTENTION_OPS:
        return "attention"
    if op in RNN_OPS:
        return "rnn"
    if op.startswith(("_foreach_", "_fused_adam", "_fused_sgd", "_amp_")):
        return "optimizer"
    if op in NORM_OPS:
        return "norm"
    return "elementwise"


def foreach_launches(numels: list[int], depth: int) -> int:
    """Kernel launches of one foreach op over tensors of these sizes, `depth` tensor lists deep."""
    if not numels:
        return 0
    per_launch = _MAX_TENSORS_BY_DEPTH.get(depth, 30)
    chunks = sum(-(-n // _CHUNK) for n in numels)
    return max(-(-len(numels) // per_launch), -(-chunks // _MAX_BLOCKS))


DEPTHWISE = "/dw"  # a convolution layout's mark: one channel per group (step_ops marks them, rows say so)


def on_cuda_cores(layout: str) -> bool:
    """A depthwise convolution in NCHW: PyTorch's own CUDA-core kernel (_conv_depthwise2d) whatever its dtype, one
    input channel per output, nothing for a tensor core to tile; channels_last ones go to cuDNN."""
    return layout == "nchw" + DEPTHWISE


# pooling ops: elementwise, but with their own fit where a calibration measured them (a max pool's backward scatters
# through its indices: VGG11 fp16's first one ran at a sixth of the H200's bandwidth)
POOL = "pool"
POOL_OPS = {"max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d", "avg_pool2d_backward",
            "max_pool3d_with_indices", "max_pool3d_with_indices_backward", "_adaptive_avg_pool2d",
            "_adaptive_avg_pool2d_backward"}

# a GEMM with a side the tensor cores' 16-byte rows do not divide (a vocabulary of 30,522 or 50,257 tokens):
# cuBLAS runs other kernels for it, on the H200 at 0.30 of the bf16 peak for an even side, 0.12-0.19 for an odd
# one ('unaligned/odd'), where aligned GEMMs reach 0.75 (gpu_calibration's 'unaligned' fits)
UNALIGNED = "unaligned"
_ELEMENTS_PER_16_BYTES = {"torch.bfloat16": 8, "torch.float16": 8, "torch.float32": 4}


def gemm_alignment(tensors) -> str:
    """The alignment mark (sides_alignment) of a GEMM over these tensors: their matrices' sides, in rows of 8 half
    or 4 single floats (16 bytes)."""
    steps = [_ELEMENTS_PER_16_BYTES.get(str(t.dtype), 0) for t in tensors]
    sides = [int(d) for t, step in zip(tensors, steps, strict=True) if step and t.dim() >= 2 for d in t.shape[-2:]]
    return sides_alignment(sides, min((s for s in steps if s), default=0))


def sides_alignment(sides, per_row: int) -> str:
    """'' for a GEMM whose matrix sides tensor cores' rows of `per_row` elements divide, else 'unaligned', or
    'unaligned/odd' where a side is odd (cuBLAS then has only 2-byte-aligned kernels)."""
    if not per_row or not any(d % per_row for d in sides):
        return ""
    return f"{UNALIGNED}/odd" if any(d % 2 for d in sides) else UNALIGNED


# cuDNN's RNN: the gates each cell computes, and how its time splits between batched GEMMs and steps
RNN_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def rnn_forward_flops(mode: str, batch: int, seq: int, input_size: int, hidden: int) -> float:
    """One layer, one direction: the input GEMM over every step (cuDNN batches it) and the recurrent GEMMs."""
    gates = RNN_GATES[mode] * hidden
    return 2.0 * batch * seq * gates * (input_size + hidden)


def attention_flops(batch_heads: int, q_len: int, kv_len: int, head_dim: int, value_dim: int,
                    causal: bool) -> float:
    """Forward FLOPs of softmax(QKᵀ)V (two GEMMs); a causal mask lets flash skip half the tiles."""
    f = 2.0 * batch_heads * q_len * kv_len * (head_dim + value_dim)
    return f / 2 if causal and q_len == kv_len else f
