"""`make calibrate-gpu`: measure the kernels of this machine's CUDA GPU into configs/catalog/gpu_kernels_<GPU>.csv.

The rows have the format of ../shared/calibration (section, op, dtype, layout, shape, pass_, ms, tflops, gbps)
plus gpu, source and date, which orchestrator/estimate/gpu_calibration.py fits per kernel class. Each `ms` is
the median of CUDA-event timings after warm-ups, PyTorch's defaults unless the row says otherwise (`tf32`:
TF32 on for matmuls and cuDNN). Beside the H200's shapes it measures what that file lacks: batch norm in half
precision and channels_last, elementwise ops in fp16, and the host's dispatch per op class (section `host`:
seconds of host time per aten op of each kernel class, forward and backward, in fp32 and under bf16 autocast).

    python bench/calibrate_gpu.py [--out FILE] [--quick]
"""
from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COLUMNS = ["gpu", "section", "op", "dtype", "layout", "shape", "pass_", "ms", "tflops", "gbps", "source", "date"]
GEMMS = ["256x256x256", "512x512x512", "1024x1024x1024", "2048x2048x2048", "4096x4096x4096", "8192x8192x8192",
         "64x4096x1024", "512x4096x1024", "2048x768x768", "8192x768x3072", "8192x3072x768", "16384x1024x4096",
         "128x1000x2048", "32x10x128"]
CONVS = [(64, 64, 64, 56, 3), (64, 64, 256, 56, 1), (64, 128, 128, 28, 3), (64, 256, 256, 14, 3),
         (64, 512, 512, 7, 3), (64, 256, 1024, 14, 1), (64, 1024, 256, 14, 1), (64, 3, 64, 112, 7),
         (256, 64, 64, 56, 3), (32, 32, 64, 8, 3)]
LSTMS = [(32, 32, 256, 1), (64, 128, 1024, 2), (128, 128, 512, 2), (64, 32, 1024, 1), (16, 256, 256, 2),
         (256, 64, 128, 1)]
ATTNS = [(8, 12, 128, 64), (8, 12, 512, 64), (8, 12, 2048, 64), (32, 16, 384, 64)]


def timed(fn, reps: int = 10, warmup: int = 3) -> float:
    """Median milliseconds of fn() by CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _dtype(name: str):
    import torch

    return {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _tf32(on: bool) -> None:
    """TF32 matmuls on or off; cuDNN keeps PyTorch's default (TF32 on) either way."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = on


def gemm_rows(quick: bool):
    import torch

    for dt in ("fp32", "tf32", "bf16", "fp16"):
        _tf32(dt == "tf32")
        for shape in GEMMS[:8] if quick else GEMMS:
            m, n, k = (int(v) for v in shape.split("x"))
            a = torch.randn(m, k, device="cuda", dtype=_dtype(dt))
            b = torch.randn(k, n, device="cuda", dtype=_dtype(dt))
            ms = timed(lambda: a @ b)
            yield dict(section="gemm", op="mm", dtype=dt, shape=shape, ms=ms, tflops=2 * m * n * k / ms / 1e9)
    _tf32(False)


def conv_rows(quick: bool):
    import torch

    for dt in ("tf32", "bf16", "fp16"):
        for layout in ("nchw", "nhwc"):
            for nb, cin, cout, hw, k in CONVS[:5] if quick else CONVS:
                conv = torch.nn.Conv2d(cin, cout, k, padding=k // 2, bias=False).cuda().to(_dtype(dt))
                x = torch.randn(nb, cin, hw, hw, device="cuda", dtype=_dtype(dt), requires_grad=True)
                if layout == "nhwc":
                    conv = conv.to(memory_format=torch.channels_last)
                    x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
                out = conv(x)
                grad = torch.randn_like(out)
                flops = 2.0 * nb * cout * hw * hw * cin * k * k
                shape = f"n{nb} c{cin}->{cout} {hw}x{hw} k{k}"
                fwd = timed(lambda: conv(x))
                bwd = timed(lambda: torch.autograd.grad(conv(x), (x, conv.weight), grad)) - fwd
                yield dict(section="conv", op="conv2d", dtype=dt, layout=layout, shape=shape, pass_="fwd", ms=fwd,
                           tflops=flops / fwd / 1e9)
                yield dict(section="conv", op="conv2d", dtype=dt, layout=layout, shape=shape, pass_="bwd",
                           ms=max(bwd, 1e-4), tflops=2 * flops / max(bwd, 1e-4) / 1e9)


def mem_rows(quick: bool):
    import torch

    for dt in ("fp32", "bf16", "fp16"):
        for numel in (1024, 65536, 1048576, 16777216, 134217728):
            x = torch.randn(numel, device="cuda", dtype=_dtype(dt))
            y = torch.randn(numel, device="cuda", dtype=_dtype(dt))
            el = x.element_size()
            for op, fn, moved in (("add", lambda: x + y, 3), ("relu", lambda: torch.relu(x), 2),
                                  ("copy_", lambda: y.copy_(x), 2)):
                ms = timed(fn)
                yield dict(section="mem", op=op, dtype=dt, shape=str(numel), ms=ms, gbps=moved * numel * el / ms / 1e6)
        for nb, c, hw in ((64, 256, 56), (64, 1024, 14), (256, 64, 56)):
            for layout in ("nchw", "nhwc"):
                bn = torch.nn.BatchNorm2d(c).cuda()
                x = torch.randn(nb, c, hw, hw, device="cuda", dtype=_dtype(dt), requires_grad=True)
                if layout == "nhwc":
                    x = x.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
                with torch.autocast("cuda", dtype=_dtype(dt), enabled=dt != "fp32"):
                    out = bn(x)
                grad = torch.randn_like(out)
                moved = 2.0 * x.numel() * x.element_size()
                fwd = timed(lambda: bn(x))
                bwd = timed(lambda: torch.autograd.grad(bn(x), (x,), grad)) - fwd
                shape = f"n{nb} c{c} {hw}x{hw}"
                yield dict(section="mem", op="batchnorm2d", dtype=dt, layout=layout, shape=shape, pass_="fwd", ms=fwd,
                           gbps=moved / fwd / 1e6)
                yield dict(section="mem", op="batchnorm2d", dtype=dt, layout=layout, shape=shape, pass_="bwd",
                           ms=max(bwd, 1e-4), gbps=1.5 * moved / max(bwd, 1e-4) / 1e6)
        if quick:
            break


def launch_rows(quick: bool):
    import time

    import torch

    x = torch.zeros(8, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(1000):
        x = x + 1
    torch.cuda.synchronize()
    per_op_ms = (time.perf_counter() - t0) * 1000 / 1000
    yield dict(section="launch", op="tiny add x1000", dtype="fp32", shape="8", ms=per_op_ms)
    layers = []
    for _ in range(20):
        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xb, yb = torch.randn(32, 64, device="cuda"), torch.randint(0, 64, (32,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()

    yield dict(section="launch", op="mlp20 step adam", dtype="fp32", shape="bs32 64x64 x20", ms=timed(step, reps=30))


# Chains of 20 identical modules on tiny tensors: the GPU finishes each kernel before the host has dispatched
# the next, so a chain's wall time is host dispatch alone (Python module calls, autocast, autograd, launches).
HOST_CHAINS = ("relu", "linear", "conv2d", "batchnorm2d", "layernorm")
HOST_CHAIN_LENGTH = 20


def _chain(op: str, device: str):
    import torch
    import torch.nn as nn

    make = {"relu": nn.ReLU, "linear": lambda: nn.Linear(16, 16), "layernorm": lambda: nn.LayerNorm(16),
            "conv2d": lambda: nn.Conv2d(8, 8, 3, padding=1, bias=False), "batchnorm2d": lambda: nn.BatchNorm2d(8)}[op]
    model = nn.Sequential(*[make() for _ in range(HOST_CHAIN_LENGTH)]).to(device).train()
    x = torch.randn(2, 8, 4, 4) if op in ("conv2d", "batchnorm2d") else torch.randn(4, 16)
    return model, x.to(device).requires_grad_()


def _ops_by_kind(fn) -> dict[str, int]:
    """The aten ops fn() dispatches, counted by the estimator's kernel class (views and allocations left out)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from orchestrator.estimate import kernels

    counts: dict[str, int] = {}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name not in kernels.FREE_OPS and name not in kernels.PROFILER_OPS:
                counts[kernels.kind_of(name)] = counts.get(kernels.kind_of(name), 0) + 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return counts


def _host_seconds_per_call(fn, device: str, reps: int) -> float:
    import time

    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        fn()
    sync()
    best = float("inf")
    for _ in range(3):  # the least disturbed of three runs
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def host_rows(quick: bool, device: str = "cuda", reps: int | None = None):
    """Host seconds per aten op of each kernel class, by pass and autocast: each chain's forward and backward
    timed and its ops counted by class, then per class the least-squares cost that explains all chains."""
    import torch

    for dt in ("fp32", "bf16"):
        samples: dict[str, list[tuple[dict[str, int], float]]] = {"fwd": [], "bwd": []}
        for op in HOST_CHAINS:
            model, x = _chain(op, device)

            def forward(model=model, x=x, half=dt == "bf16"):
                with torch.autocast(device, dtype=torch.bfloat16, enabled=half):
                    return model(x).float().sum()

            def step(forward=forward):
                forward().backward()

            fwd_ops, all_ops = _ops_by_kind(forward), _ops_by_kind(step)
            bwd_ops = {k: all_ops.get(k, 0) - fwd_ops.get(k, 0) for k in all_ops}
            n = reps or (20 if quick else 100)
            fwd_s = _host_seconds_per_call(forward, device, n)
            step_s = _host_seconds_per_call(step, device, n)
            samples["fwd"].append((fwd_ops, fwd_s))
            samples["bwd"].append((bwd_ops, max(step_s - fwd_s, 0.0)))
        for pass_, rows in samples.items():
            for kind, seconds in _per_kind(rows).items():
                yield dict(section="host", op=kind, dtype=dt, pass_=pass_, ms=seconds * 1e3,
                           shape=f"per aten op, {HOST_CHAIN_LENGTH}-module chains of " + " ".join(HOST_CHAINS))


def _per_kind(rows: list[tuple[dict[str, int], float]]) -> dict[str, float]:
    """Seconds per op of each class: least squares over the chains (ops by class × cost = chain seconds),
    a class whose solution is not positive left out (its ops are then priced by the prior)."""
    import torch

    kinds = sorted({k for counts, _ in rows for k, n in counts.items() if n > 0})
    a = torch.tensor([[float(counts.get(k, 0)) for k in kinds] for counts, _ in rows], dtype=torch.float64)
    b = torch.tensor([[seconds] for _, seconds in rows], dtype=torch.float64)
    cost = torch.linalg.lstsq(a, b).solution.flatten().tolist()
    return {k: c for k, c in zip(kinds, cost, strict=True) if c > 0}


def optim_rows(quick: bool):
    import torch

    params = [torch.nn.Parameter(torch.randn(1048576, device="cuda")) for _ in range(160)]
    for p in params:
        p.grad = torch.randn_like(p)
    for name, make in (("adam foreach", lambda: torch.optim.Adam(params, foreach=True)),
                       ("adam fused", lambda: torch.optim.Adam(params, fused=True)),
                       ("adamw foreach", lambda: torch.optim.AdamW(params, foreach=True)),
                       ("sgd-momentum foreach", lambda: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True))):
        opt = make()
        ms = timed(opt.step)
        yield dict(section="optim", op=name, dtype="fp32", shape="160 tensors x 1048576", ms=ms)


def lstm_rows(quick: bool):
    import torch

    for dt in ("fp32", "bf16"):
        for b, s, h, layers in LSTMS:
            lstm = torch.nn.LSTM(h, h, layers, batch_first=True).cuda()
            x = torch.randn(b, s, h, device="cuda")

            def step():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dt == "bf16"):
                    out, _ = lstm(x)
                out.float().sum().backward()

            yield dict(section="lstm", op="lstm fwd+bwd", dtype=dt, shape=f"b{b} s{s} h{h} L{layers}", ms=timed(step))


def attn_rows(quick: bool):
    import torch
    import torch.nn.functional as F

    for dt in ("bf16", "fp32"):
        for b, heads, s, d in ATTNS:
            q, k, v = (torch.randn(b, heads, s, d, device="cuda", dtype=_dtype(dt), requires_grad=True)
                       for _ in range(3))

            def step():
                F.scaled_dot_product_attention(q, k, v).sum().backward()

            yield dict(section="attn", op="sdpa fwd+bwd", dtype=dt, shape=f"b{b} h{heads} s{s} d{d}", ms=timed(step))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="default: configs/catalog/gpu_kernels_<GPU>.csv")
    ap.add_argument("--quick", action="store_true", help="fewer shapes (a few seconds)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"calibrate-gpu: no CUDA GPU visible to torch here (torch {torch.__version__}); run it on the GPU")
    from infra.local.gpus import local_gpu_name

    gpu = local_gpu_name() or torch.cuda.get_device_name().replace(" ", "")
    out = Path(args.out or ROOT / "configs" / "catalog" / f"gpu_kernels_{gpu}.csv")
    props = torch.cuda.get_device_properties(0)
    source = (f"make calibrate-gpu on this machine's {torch.cuda.get_device_name()} ({props.multi_processor_count} "
              f"SMs), PyTorch {torch.__version__}, CUDA-event median (bench/calibrate_gpu.py)")
    today = datetime.date.today().isoformat()
    rows = []
    for section in (gemm_rows, conv_rows, mem_rows, launch_rows, host_rows, optim_rows, lstm_rows, attn_rows):
        for r in section(args.quick):
            rows.append({c: "" for c in COLUMNS} | {k: (f"{v:.5g}" if isinstance(v, float) else v)
                                                     for k, v in r.items()} | {"gpu": gpu, "source": source,
                                                                               "date": today})
        print(f"{section.__name__}: {len(rows)} rows", flush=True)
        with open(out, "w", newline="") as f:  # after each section: a time limit keeps what was measured
            w = csv.DictWriter(f, COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    print(f"wrote {len(rows)} rows to {out}")


if __name__ == "__main__":
    main()
