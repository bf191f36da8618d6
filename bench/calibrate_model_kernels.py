"""Kernels and host costs that real models have and bench/calibrate_gpu.py's generic shapes lack (needs CUDA).

Rows in the catalog's kernel format (configs/catalog/gpu_kernels*.csv), appended to --out:
- conv, layout 'nchw/dw' / 'nhwc/dw': depthwise convolutions (MobileNet's 3×3, ConvNeXt's 7×7, EfficientNet's 5×5),
  fp32 (TF32 default) and bf16, forward and backward;
- gemm, layout 'unaligned' / 'unaligned/odd': GEMMs with a vocabulary side tensor cores' rows do not divide
  (30,522: even; 50,257: odd), bf16 and fp16;
- mem 'batchnorm2d' at few channels and large maps (MobileNet's first blocks), fp32 NCHW, forward and backward;
- mem 'cross_entropy': log-softmax + NLL over a large vocabulary, fp32 logits, forward + backward;
- mem 'maxpool2d', layout 'pool': max pooling forward and its backward (a scatter through the indices: VGG11 fp16's
  first one took 1.9 ms on the H200, a sixth of the bandwidth), fp32 and fp16;
- host_param, op = optimizer implementation: host seconds per parameter tensor of a step's per-tensor work (zero_grad,
  AccumulateGrad, the optimizer's loop) for Adam foreach, fused and for-loop: the slope between steps over 64 and
  512 tiny tensors (GPU work negligible), what orchestrator/estimate/host_time.py's PER_PARAM_SECONDS prices.

    python bench/calibrate_model_kernels.py --out FILE [--quick] [--device cpu]

`--device cpu --quick` runs every section on this machine's CPU with small shapes (how the tests check the script
itself; the figures are the CPU's, not a GPU's).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

QUICK_SHAPES = 2  # --quick: the first shapes of each list, shrunk
DEVICE = "cuda"
QUICK = False
DEPTHWISE = [(128, 32, 112, 3), (128, 96, 56, 3), (128, 384, 14, 3), (64, 96, 56, 7), (64, 384, 14, 7),
             (64, 768, 7, 7), (64, 240, 28, 5)]
VOCAB_GEMMS = ["8192x50257x768", "8192x768x50257", "50257x768x8192", "4096x30522x768", "4096x768x30522",
               "30522x768x4096", "8192x32000x1024"]
FEW_CHANNEL_BN = [(128, 16, 112), (128, 32, 112), (128, 96, 112), (256, 64, 56), (128, 144, 56)]
VOCAB_CE = [(8192, 50257), (4096, 30522), (8192, 32128)]
MAXPOOLS = [(64, 64, 224, 2, 2), (64, 128, 112, 2, 2), (64, 64, 112, 3, 2), (128, 256, 56, 2, 2)]  # n c hw k stride


def _shapes(shapes: list, quick: bool) -> list:
    """The shapes to time; --quick: the first few, their first (batch or rows) dimension cut to 2."""
    if not quick:
        return shapes
    out = []
    for s in shapes[:QUICK_SHAPES]:
        if isinstance(s, str):  # a GEMM "MxNxK": M cut
            out.append("x".join(["2", *s.split("x")[1:]]))
        else:
            out.append((2, *s[1:]))
    return out


def timed(fn, reps: int = 10, warmup: int = 3) -> float:
    """Median milliseconds of fn(): by CUDA events on a GPU, by the clock on the CPU."""
    reps, warmup = (2, 1) if QUICK else (reps, warmup)
    if DEVICE == "cuda":
        from calibrate_gpu import timed as cuda_timed

        return cuda_timed(fn, reps, warmup)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def depthwise_rows(quick: bool):
    import torch

    from calibrate_gpu import _tf32

    for n, c, hw, k in _shapes(DEPTHWISE, quick):
        for dtype in ("tf32", "bf16"):
            for layout in ("nchw", "nhwc"):
                _tf32(dtype == "tf32")
                dt = torch.float32 if dtype == "tf32" else torch.bfloat16
                fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
                conv = torch.nn.Conv2d(c, c, k, padding=k // 2, groups=c, bias=False).to(DEVICE)
                conv = conv.to(dt, memory_format=fmt)
                x = torch.randn(n, c, hw, hw, device=DEVICE, dtype=dt).contiguous(memory_format=fmt).requires_grad_()
                y = conv(x)
                g = torch.randn_like(y)
                shape = f"n{n} c{c}->{c} {hw}x{hw} k{k}"
                yield dict(section="conv", op="conv2d", dtype=dtype, layout=f"{layout}/dw", shape=shape, pass_="fwd",
                           ms=timed(lambda conv=conv, x=x: conv(x)))
                yield dict(section="conv", op="conv2d", dtype=dtype, layout=f"{layout}/dw", shape=shape, pass_="bwd",
                           ms=timed(lambda y=y, g=g, x=x, conv=conv: torch.autograd.grad(
                               y, (x, conv.weight), g, retain_graph=True)))
    _tf32(False)


def vocab_gemm_rows(quick: bool):
    import torch

    from orchestrator.estimate import kernels

    for shape in _shapes(VOCAB_GEMMS, quick):
        m, n, k = (int(v) for v in shape.split("x"))
        for dtype, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            a, b = torch.randn(m, k, device=DEVICE, dtype=dt), torch.randn(k, n, device=DEVICE, dtype=dt)
            layout = kernels.sides_alignment((m, n, k), 8)
            ms = timed(lambda a=a, b=b: a @ b)
            yield dict(section="gemm", op="mm", dtype=dtype, layout=layout, shape=shape, ms=ms,
                       tflops=round(2 * m * n * k / ms / 1e9, 2))


def memory_rows(quick: bool):
    import torch

    for n, c, hw in _shapes(FEW_CHANNEL_BN, quick):
        bn = torch.nn.BatchNorm2d(c).to(DEVICE)
        x = torch.randn(n, c, hw, hw, device=DEVICE).requires_grad_()
        y = bn(x)
        g = torch.randn_like(y)
        moved = x.numel() * 4
        shape = f"n{n} c{c} {hw}x{hw}"
        fwd = timed(lambda bn=bn, x=x: bn(x))
        bwd = timed(lambda y=y, g=g, x=x: torch.autograd.grad(y, x, g, retain_graph=True))
        yield dict(section="mem", op="batchnorm2d", dtype="fp32", layout="nchw", shape=shape, pass_="fwd", ms=fwd,
                   gbps=round(2 * moved / fwd / 1e6, 1))
        yield dict(section="mem", op="batchnorm2d", dtype="fp32", layout="nchw", shape=shape, pass_="bwd", ms=bwd,
                   gbps=round(3 * moved / bwd / 1e6, 1))
    for rows_, vocab in _shapes(VOCAB_CE, quick):
        logits = torch.randn(rows_, vocab, device=DEVICE).requires_grad_()
        target = torch.randint(0, vocab, (rows_,), device=DEVICE)

        def step(logits=logits, target=target):
            torch.nn.functional.cross_entropy(logits, target).backward()

        ms = timed(step)
        yield dict(section="mem", op="cross_entropy", dtype="fp32", shape=f"{rows_}x{vocab}", pass_="fwd+bwd", ms=ms,
                   gbps=round(4 * logits.numel() * 4 / ms / 1e6, 1))


def pool_rows(quick: bool):
    import torch

    for n, c, hw, k, stride in _shapes(MAXPOOLS, quick):
        for dtype, dt in (("fp32", torch.float32), ("fp16", torch.float16)):
            x = torch.randn(n, c, hw, hw, device=DEVICE, dtype=dt).requires_grad_()
            y = torch.nn.functional.max_pool2d(x, k, stride, padding=k // 2 if k == 3 else 0)
            g = torch.randn_like(y)
            moved = (x.numel() + y.numel()) * x.element_size()
            shape = f"n{n} c{c} {hw}x{hw} k{k} s{stride}"
            fwd = timed(lambda x=x, k=k, stride=stride: torch.nn.functional.max_pool2d(
                x, k, stride, padding=k // 2 if k == 3 else 0))
            bwd = timed(lambda y=y, g=g, x=x: torch.autograd.grad(y, x, g, retain_graph=True))
            yield dict(section="mem", op="maxpool2d", dtype=dtype, layout="pool", shape=shape, pass_="fwd", ms=fwd,
                       gbps=round(moved / fwd / 1e6, 1))
            yield dict(section="mem", op="maxpool2d", dtype=dtype, layout="pool", shape=shape, pass_="bwd", ms=bwd,
                       gbps=round((moved + x.numel() * x.element_size()) / bwd / 1e6, 1))


def host_param_rows(quick: bool):
    """Host seconds per parameter tensor of zero_grad + backward's AccumulateGrad + optimizer.step."""
    import torch

    def step_seconds(tensors: int, impl: str) -> float:
        params = [torch.nn.Parameter(torch.randn(16, device=DEVICE)) for _ in range(tensors)]
        kw = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
        opt = torch.optim.Adam(params, lr=1e-3, **kw)

        def step():
            opt.zero_grad(set_to_none=True)
            torch.stack([p.sum() for p in params]).sum().backward()
            opt.step()

        sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
        for _ in range(3):
            step()
        sync()
        reps = 5 if quick else 20
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        sync()
        return (time.perf_counter() - t0) / reps

    for impl in ("foreach", "fused", "for-loop"):
        few, many = step_seconds(64, impl), step_seconds(512, impl)
        yield dict(section="host_param", op=impl, dtype="fp32", shape="Adam, 64 and 512 tensors of 16",
                   ms=(many - few) / (512 - 64) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the kernels CSV to append to (written with a header if new)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = ap.parse_args()
    import torch

    from calibrate_gpu import COLUMNS

    from infra.local.gpus import local_gpu_name

    global DEVICE, QUICK
    DEVICE, QUICK = args.device, args.quick
    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("calibrate_model_kernels: no CUDA GPU visible to torch here; run it on the GPU (or --device cpu)")
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    gpu = (local_gpu_name() or name.replace(" ", "")) if DEVICE == "cuda" else "CPU"
    source = (f"bench/calibrate_model_kernels.py on this machine's {name}, PyTorch {torch.__version__}, "
              f"{'CUDA-event' if DEVICE == 'cuda' else 'clock'} median")
    out = Path(args.out)
    new = not out.exists()
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        if new:
            w.writeheader()
        for section in (depthwise_rows, vocab_gemm_rows, memory_rows, pool_rows, host_param_rows):
            n = 0
            for row in section(args.quick):
                row = {k: (f"{v:.5g}" if isinstance(v, float) else v) for k, v in row.items()}
                w.writerow({c: "" for c in COLUMNS} | row | dict(gpu=gpu, source=source,
                                                                  date=datetime.date.today().isoformat()))
                n += 1
            f.flush()
            print(f"{section.__name__}: {n} rows", flush=True)


if __name__ == "__main__":
    main()
