"""configs/catalog/gpu_kernels*.csv, the per-kernel measurements the GPU estimator is calibrated with (the public
figures of gpu_kernels.csv, the H200's measured runs, what `make calibrate-gpu` writes): every row of every file
names a GPU of the table, a source and the date of its measurement, its throughput agrees with its shape and time,
and no row claims more than the GPU's datasheet allows."""
from __future__ import annotations

import csv
import datetime as dt
import math
import re

import pytest

from configs import CATALOG_DIR
from infra.catalog import gpu_spec
from orchestrator.estimate.gpu_calibration import OPTIMIZER_BYTES_PER_PARAM

COLUMNS = ["gpu", "section", "op", "dtype", "layout", "shape", "pass_", "ms", "tflops", "gbps", "source", "date"]
CONV = re.compile(r"^n(\d+) c(\d+)->(\d+) (\d+)x(\d+) k(\d+)$")
LSTM = re.compile(r"^b(\d+) s(\d+) h(\d+) L(\d+)$")  # the shapes orchestrator/estimate/gpu_calibration.py reads
ATTN = re.compile(r"^b(\d+) h(\d+) s(\d+) d(\d+)$")
# the sections the calibration reads: kernels timed by FLOPs (gemm, conv, lstm, attn) or bytes (mem, optim), a
# host-to-device copy, launch chains and the host's per-op cost
SECTIONS = {"gemm", "conv", "mem", "lstm", "attn", "optim", "h2d", "launch", "host"}
# GeForce cards boost well past their rated boost clock (the datasheet peak's clock) when not power-bound:
# measured square GEMMs reach 1.05x (RTX 4090) to 1.15x (RTX 5090) of it. Other cards hold their rated clock.
GEFORCE = re.compile(r"^RTX\d{4}")
GEFORCE_BOOST, RATED = 1.2, 1.02
# cuDNN's Winograd (F(4x4,3x3)) and FFT convolutions do up to 4x fewer multiplies than a direct convolution, so
# direct-convolution FLOPs / time can exceed the peak (observed up to 1.5x for fp32 3x3 convolutions).
FEWER_MULTIPLIES = 4.0

FILES = sorted(CATALOG_DIR.glob("gpu_kernels*.csv"))  # every file the calibration reads (gpu_calibration.py)


def _rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS, path.name
        return [{**row, "file": path.name} for row in reader]


ALL_ROWS = [row for path in FILES for row in _rows(path)]
ROWS = [r for r in ALL_ROWS if r["file"] == "gpu_kernels.csv"]  # the public figures


def _id(r: dict[str, str]) -> str:
    where = "" if r["file"] == "gpu_kernels.csv" else r["file"].removeprefix("gpu_kernels_").removesuffix(".csv") + ":"
    return f"{where}{r['gpu']}-{r['section']}-{r['op']}-{r['dtype']}-{r['layout']}-{r['pass_']}-{r['shape']}"


def _every_row(rows: list[dict[str, str]], check) -> None:
    """One test per check reads every row (of every file) and names each row that fails it, with why: a data file
    is checked as a whole, not as a test per row."""
    assert rows, "no rows to check: a file or section the check reads is gone"
    failures = []
    for row in rows:
        try:
            check(row)
        except (AssertionError, ValueError, TypeError, AttributeError) as e:
            why = str(e).splitlines()[0] if str(e) else ""
            failures.append(f"{row['file']}: {_id(row)}: {type(e).__name__}: {why}")
    assert not failures, f"{len(failures)} of {len(rows)} rows fail:\n" + "\n".join(failures[:40])


def _flops(row: dict[str, str]) -> float:
    if row["section"] == "gemm":
        m, n, k = (int(x) for x in row["shape"].split("x"))
        return 2.0 * m * n * k
    b, cin, cout, h, w, k = (int(x) for x in CONV.match(row["shape"]).groups())  # type: ignore[union-attr]
    per_group = 1 if row["layout"].endswith("/dw") else cin  # depthwise: one input channel per group
    return 2.0 * b * cout * h * w * per_group * k * k * (2 if row["pass_"] == "bwd" else 1)  # bwd: input + weight grads


def test_every_kernel_file_is_read_and_the_h200s_measured_classes_are_there():
    assert [p.name for p in FILES][:2] == ["gpu_kernels.csv", "gpu_kernels_h200.csv"], FILES
    for path in FILES:
        assert any(r["file"] == path.name for r in ALL_ROWS), f"{path.name} has no rows"
    h200 = {(r["section"], r["dtype"]) for r in ALL_ROWS if r["gpu"] == "H200"}
    assert {("gemm", d) for d in ("fp32", "tf32", "fp16", "bf16")} | {("conv", "bf16"), ("mem", "fp32"),
                                                                      ("lstm", "fp32"), ("attn", "bf16")} <= h200


def test_the_file_covers_the_gpus_the_estimator_needs_most():
    gpus = {r["gpu"] for r in ROWS}
    assert {"A100", "V100", "T4", "L4", "A10G", "H100", "RTX4090"} <= gpus
    a100_gemms = {r["dtype"] for r in ROWS if r["gpu"] == "A100" and r["section"] == "gemm"}
    assert a100_gemms == {"fp32", "tf32", "fp16", "bf16"}
    assert {r["section"] for r in ROWS} >= {"gemm", "conv", "mem"}


def _sourced_dated_known_gpu(row):
    assert gpu_spec(row["gpu"]) is not None, row["gpu"]
    assert row["source"].strip()
    assert dt.date.fromisoformat(row["date"]) <= dt.date.today()
    assert row["section"] in (SECTIONS if row["file"] != "gpu_kernels.csv" else {"gemm", "conv", "mem"})
    assert float(row["ms"]) > 0
    assert row["dtype"] in {"fp32", "tf32", "fp16", "bf16"}
    assert row["dtype"] != "tf32" or gpu_spec(row["gpu"]).has_tf32  # TF32 exists from Ampere on


def _compute_row(row):
    if row["section"] == "gemm":
        assert row["op"] == "mm" and re.fullmatch(r"\d+x\d+x\d+", row["shape"])
    else:
        assert row["op"] == "conv2d" and CONV.match(row["shape"]) and row["layout"] in {"nchw", "nhwc", "nchw/dw", "nhwc/dw"}
        assert row["pass_"] in {"fwd", "bwd"}
    achieved = _flops(row) / (float(row["ms"]) * 1e-3) / 1e12
    if row["tflops"]:  # written: within 2 %, or within the rounding of its digits (a 1-decimal 0.0 for a tiny GEMM)
        written = 0.5 * 10.0 ** -len(row["tflops"].partition(".")[2])
        assert float(row["tflops"]) == pytest.approx(achieved, rel=0.02, abs=written)
    tflops = achieved  # (a profiled step's rows write only the time: its shape and time still meet the peak)
    spec = gpu_spec(row["gpu"])
    allowance = GEFORCE_BOOST if GEFORCE.match(spec.name) else RATED
    if row["section"] == "conv" and re.search(r"Winograd|FFT", row["source"]):
        allowance *= FEWER_MULTIPLIES
    assert tflops <= spec.peak_tflops(row["dtype"]) * allowance, (spec.name, spec.peak_tflops(row["dtype"]))


def _memory_row(row):
    bandwidth = gpu_spec(row["gpu"]).memory_bandwidth_gbps
    if row["section"] == "optim" and row["op"] in OPTIMIZER_BYTES_PER_PARAM:
        # the bytes the calibration says the step moves (its per-parameter table), over the row's time
        tensors, size = (int(n) for n in re.fullmatch(r"(\d+) tensors x (\d+)", row["shape"]).groups())  # type: ignore[union-attr]
        moved = tensors * size * OPTIMIZER_BYTES_PER_PARAM[row["op"]]
        assert 0 < moved / (float(row["ms"]) * 1e-3) / 1e9 <= bandwidth, row
    if row["section"] == "optim" and not row["gbps"]:
        return  # the dated runs write no bandwidth for optimizer steps: the bytes above are the check
    gbps = float(row["gbps"])
    assert 0 < gbps <= bandwidth
    # elements per tensor, its [B, H] shape, a batch norm's "nN cC HxW", an optimizer's "T tensors x N"
    sizes = [int(n) for n in re.findall(r"\d+", row["shape"].split(" pinned=")[0])]
    assert sizes and math.prod(sizes) > 0, row["shape"]


def _rnn_or_attention_row(row):
    if row["section"] == "lstm":
        assert LSTM.match(row["shape"]), row["shape"]
    elif row["op"].startswith("sdpa") or row["op"].startswith("math"):
        assert ATTN.match(row["shape"]), row["shape"]
    spec = gpu_spec(row["gpu"])
    # an 'fp32' LSTM runs as PyTorch runs it, cuDNN in TF32 (torch.backends.cudnn.allow_tf32 is on by default;
    # the calibration fits it so): its peak is the TF32 one
    math_mode = "tf32" if row["section"] == "lstm" and row["dtype"] == "fp32" and spec.has_tf32 else row["dtype"]
    if row["tflops"]:
        assert 0 < float(row["tflops"]) <= spec.peak_tflops(math_mode) * RATED


def _launch_or_host_row(row):
    assert 0 < float(row["ms"]) < 1000 and not row["tflops"] and not row["gbps"], row


def test_every_row_is_sourced_dated_and_of_a_known_gpu():
    _every_row(ALL_ROWS, _sourced_dated_known_gpu)


def test_compute_rows_agree_with_their_shape_and_stay_under_the_datasheet_peak():
    _every_row([r for r in ALL_ROWS if r["section"] in ("gemm", "conv")], _compute_row)


def test_memory_rows_stay_under_the_memory_bandwidth():
    _every_row([r for r in ALL_ROWS if r["section"] in ("mem", "optim", "h2d")], _memory_row)


def test_rnn_and_attention_rows_have_a_shape_the_calibration_reads_and_stay_under_the_peak():
    _every_row([r for r in ALL_ROWS if r["section"] in ("lstm", "attn")], _rnn_or_attention_row)


def test_launch_and_host_rows_are_per_op_times_below_a_second():
    _every_row([r for r in ALL_ROWS if r["section"] in ("launch", "host")], _launch_or_host_row)
