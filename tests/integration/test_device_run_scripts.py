"""The device run's new calibration script (bench/gpu_device_run.sh runs it on a lent GPU, once, as it is): here on
the CPU with small shapes, so a mistake in it is found before the GPU's minutes are spent; its rows are read by the
calibration as the GPU's would be."""
import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_calibrate_model_kernels_writes_every_section_in_the_catalog_format(tmp_path):
    out = tmp_path / "kernels.csv"
    run = subprocess.run([sys.executable, "bench/calibrate_model_kernels.py", "--out", str(out), "--quick",
                          "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    sections = {(r["section"], r["layout"]) for r in rows}
    assert {("conv", "nchw/dw"), ("conv", "nhwc/dw"), ("gemm", "unaligned/odd"), ("mem", "nchw"), ("mem", "pool"),
            ("host_param", "")} <= sections
    assert {r["op"] for r in rows if r["section"] == "host_param"} == {"foreach", "fused", "for-loop"}
    assert all(float(r["ms"]) > 0 for r in rows if r["section"] != "host_param")
    with open(ROOT / "configs" / "catalog" / "gpu_kernels.csv", newline="") as f:
        assert list(rows[0]) == csv.DictReader(f).fieldnames  # the catalog's columns, in its order


def test_the_device_script_runs_each_step_under_its_own_limit_within_the_budget():
    script = (ROOT / "bench" / "gpu_device_run.sh").read_text()
    limits = [int(line.split()[1]) for line in script.splitlines() if line.startswith("timeout ")]
    assert len(limits) == 4 and sum(limits) <= 410  # the device run gives the script 420 s
    for step in ("calibrate_gpu.py", "calibrate_model_kernels.py", "estimator_gpu.py", "host_steps.py"):
        assert step in script
    assert subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_device_run.sh")]).returncode == 0
