"""Kernel rows the microbenchmarks lack, taken from the training steps a device run profiled (its breakdown.csv).

bench/calibrate_gpu.py times generic shapes; some kernels a real model runs are of another kind, and the run's
per-op profile (torch.profiler self device time per call, with input shapes) is a measurement of them:
- GEMMs with a side the tensor cores' 16-byte rows do not divide (a 30,522- or 50,257-token vocabulary): layout
  'unaligned', or 'unaligned/odd' for an odd side;
- depthwise convolutions (one channel per group), forward and backward: layout 'nchw/dw' or 'nhwc/dw'.
Only the suite's *seen* loops are read (bench/estimator_gpu.py SUITE): the held-out loops stay out of every fit.
Writes the rows in the catalog's kernel format (configs/catalog/gpu_kernels*.csv) to standard output.

    python bench/step_kernels.py DIR GPU > configs/catalog/gpu_kernels_<gpu>_steps_<date>.csv
"""
from __future__ import annotations

import ast
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

COLUMNS = ["gpu", "section", "op", "dtype", "layout", "shape", "pass_", "ms", "tflops", "gbps", "source", "date"]
GEMM_OPS = {"aten::mm", "aten::addmm"}
DTYPES = {"bf16": "bf16", "fp16": "fp16", "fp32": "tf32"}  # a loop's precision -> its GEMMs' and convs' math


def _shapes(detail: str) -> list[list[int]]:
    try:
        return [s for s in ast.literal_eval(detail) if isinstance(s, list)]
    except (ValueError, SyntaxError):
        return []


def gemm_row(op: str, shapes: list[list[int]], dtype: str) -> dict | None:
    """mm (a, b) or addmm (bias, a, b) with a side not a multiple of 8 (16 bytes of a half float)."""
    mats = [s for s in shapes if len(s) == 2][-2:]
    if op not in GEMM_OPS or len(mats) != 2 or dtype not in ("bf16", "fp16"):
        return None
    from orchestrator.estimate import kernels

    (m, k), (_, n) = mats
    layout = kernels.sides_alignment((m, n, k), 8)  # 8 half floats to tensor cores' 16-byte rows
    if not layout:
        return None
    return dict(section="gemm", op="mm", dtype=dtype, layout=layout, shape=f"{m}x{n}x{k}", pass_="")


def depthwise_row(op: str, shapes: list[list[int]], dtype: str, layout: str) -> dict | None:
    """A depthwise convolution: forward (_conv_depthwise2d / convolution) or its backward (convolution_backward:
    grad_out, input, weight)."""
    if op in ("aten::_conv_depthwise2d", "aten::convolution", "aten::cudnn_convolution"):
        pass_, x, w, out = "fwd", shapes[0] if shapes else [], shapes[1] if len(shapes) > 1 else [], None
    elif op == "aten::convolution_backward" and len(shapes) >= 3:
        pass_, out, x, w = "bwd", shapes[0], shapes[1], shapes[2]
    else:
        return None
    if len(w) != 4 or w[1] != 1 or len(x) != 4 or w[0] != x[1]:
        return None
    n, c, h, wd = out if out else x  # forward rows carry no output: stride 1, same size
    return dict(section="conv", op="conv2d", dtype=dtype, layout=f"{layout}/dw", pass_=pass_,
                shape=f"n{n} c{c}->{c} {h}x{wd} k{w[2]}")


def rows(run: Path, gpu: str, date: str) -> list[dict]:
    from estimator_gpu import SUITE

    seen = {name: fields for name, is_seen, fields in SUITE if is_seen}
    source = (f"torch.profiler self device time per call in a training step of the suite's seen loop {{}}, "
              f"{run.name}/breakdown.csv (bench/step_kernels.py)")
    out = []
    with open(run / "breakdown.csv", newline="") as f:
        for r in csv.DictReader(f):
            fields = seen.get(r["model"])
            if r["row"] != "op" or fields is None or not r["calls_per_step"]:
                continue
            dtype = DTYPES[fields.get("precision", "fp32")]
            layout = "nhwc" if fields.get("memory_format") == "channels_last" else "nchw"
            shapes = _shapes(r["detail"])
            row = gemm_row(r["name"], shapes, dtype) or depthwise_row(r["name"], shapes, dtype, layout)
            if row:
                ms = float(r["measured_ms"]) / float(r["calls_per_step"])
                out.append({c: "" for c in COLUMNS} | row | dict(gpu=gpu, ms=f"{ms:.5g}",
                                                                  source=source.format(r["model"]), date=date))
    return out


def main() -> None:
    run, gpu = Path(sys.argv[1]), sys.argv[2]
    date = next((p for p in run.name.split("_") if p[:2] == "20"), "")
    w = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows(run, gpu, date))


if __name__ == "__main__":
    main()
