"""configs/catalog/gpu_kernels.csv, the public per-kernel measurements the GPU estimator is calibrated with:
every row names a GPU of the table, a source and the date of its measurement, its throughput agrees with its
shape and time, and no row claims more than the GPU's datasheet allows."""
from __future__ import annotations

import csv
import datetime as dt
import math
import re

import pytest

from configs import CATALOG_DIR
from infra.catalog import gpu_spec

COLUMNS = ["gpu", "section", "op", "dtype", "layout", "shape", "pass_", "ms", "tflops", "gbps", "source", "date"]
CONV = re.compile(r"^n(\d+) c(\d+)->(\d+) (\d+)x(\d+) k(\d+)$")
# GeForce cards boost well past their rated boost clock (the datasheet peak's clock) when not power-bound:
# measured square GEMMs reach 1.05x (RTX 4090) to 1.15x (RTX 5090) of it. Other cards hold their rated clock.
GEFORCE = re.compile(r"^RTX\d{4}")
GEFORCE_BOOST, RATED = 1.2, 1.02
# cuDNN's Winograd (F(4x4,3x3)) and FFT convolutions do up to 4x fewer multiplies than a direct convolution, so
# direct-convolution FLOPs / time can exceed the peak (observed up to 1.5x for fp32 3x3 convolutions).
FEWER_MULTIPLIES = 4.0


def _rows() -> list[dict[str, str]]:
    with open(CATALOG_DIR / "gpu_kernels.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


ROWS = _rows()


def _flops(row: dict[str, str]) -> float:
    if row["section"] == "gemm":
        m, n, k = (int(x) for x in row["shape"].split("x"))
        return 2.0 * m * n * k
    b, cin, cout, h, w, k = (int(x) for x in CONV.match(row["shape"]).groups())  # type: ignore[union-attr]
    return 2.0 * b * cout * h * w * cin * k * k * (2 if row["pass_"] == "bwd" else 1)  # bwd: input + weight grads


def test_the_file_covers_the_gpus_the_estimator_needs_most():
    gpus = {r["gpu"] for r in ROWS}
    assert {"A100", "V100", "T4", "L4", "A10G", "H100", "RTX4090"} <= gpus
    a100_gemms = {r["dtype"] for r in ROWS if r["gpu"] == "A100" and r["section"] == "gemm"}
    assert a100_gemms == {"fp32", "tf32", "fp16", "bf16"}
    assert {r["section"] for r in ROWS} >= {"gemm", "conv", "mem"}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['gpu']}-{r['section']}-{r['dtype']}-{r['shape']}")
def test_every_row_is_sourced_dated_and_of_a_known_gpu(row):
    assert gpu_spec(row["gpu"]) is not None, row["gpu"]
    assert row["source"].strip()
    assert dt.date.fromisoformat(row["date"]) <= dt.date.today()
    assert row["section"] in {"gemm", "conv", "mem"} and float(row["ms"]) > 0
    assert row["dtype"] in {"fp32", "tf32", "fp16", "bf16"}
    assert row["dtype"] != "tf32" or gpu_spec(row["gpu"]).has_tf32  # TF32 exists from Ampere on


@pytest.mark.parametrize("row", [r for r in ROWS if r["section"] in ("gemm", "conv")],
                         ids=lambda r: f"{r['gpu']}-{r['section']}-{r['dtype']}-{r['shape']}")
def test_compute_rows_agree_with_their_shape_and_stay_under_the_datasheet_peak(row):
    if row["section"] == "gemm":
        assert row["op"] == "mm" and re.fullmatch(r"\d+x\d+x\d+", row["shape"])
    else:
        assert row["op"] == "conv2d" and CONV.match(row["shape"]) and row["layout"] in {"nchw", "nhwc"}
        assert row["pass_"] in {"fwd", "bwd"}
    tflops = float(row["tflops"])
    assert tflops == pytest.approx(_flops(row) / (float(row["ms"]) * 1e-3) / 1e12, rel=0.02)
    spec = gpu_spec(row["gpu"])
    allowance = GEFORCE_BOOST if GEFORCE.match(spec.name) else RATED
    if row["section"] == "conv" and re.search(r"Winograd|FFT", row["source"]):
        allowance *= FEWER_MULTIPLIES
    assert tflops <= spec.peak_tflops(row["dtype"]) * allowance, (spec.name, spec.peak_tflops(row["dtype"]))


@pytest.mark.parametrize("row", [r for r in ROWS if r["section"] == "mem"],
                         ids=lambda r: f"{r['gpu']}-{r['op']}-{r['shape']}")
def test_memory_rows_stay_under_the_memory_bandwidth(row):
    gbps = float(row["gbps"])
    assert 0 < gbps <= gpu_spec(row["gpu"]).memory_bandwidth_gbps
    assert math.prod(int(n) for n in row["shape"].split("x")) > 0  # elements per tensor, or its [B, H] shape
