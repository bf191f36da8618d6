"""bench/estimator_gpu.py --measured: the GPU model against a real H200 run recorded in tests/support/data (a copy of
../shared/calibration/h200_device_run_2026-11-28), without a GPU: every suite loop gets its measured step beside the
prediction, and the seen and held-out loops' errors stay inside what the issue asks of the model, with margin."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests" / "support" / "data" / "h200_device_run_2026-11-28"


def test_the_recorded_h200_run_is_predicted_without_a_gpu(tmp_path):
    out = subprocess.run([sys.executable, "bench/estimator_gpu.py", "--measured", str(RUN)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, env={"DLRUN_HOME": str(tmp_path),
                                                                         "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "measured on an NVIDIA H200" in lines[0]
    rows = [ln for ln in lines if re.search(r"\d+\.\d+ms\s+\d+\.\d+ms", ln)]
    assert len(rows) == 16
    cells = [re.search(r"([\d.]+)-\s*([\d.]+)\s+([\d.]+)\s+(yes|NO)", ln) for ln in rows]
    assert all(cells), rows
    in_range = sum(c.group(4) == "yes" for c in cells if c)
    ratios = [float(c.group(3)) for c in cells if c]
    assert all(0.6 < r < 1.6 for r in ratios), rows
    assert in_range >= 14, rows
    summary = {m.group(1): (float(m.group(2)), float(m.group(3))) for ln in lines
               if (m := re.match(r"(seen|held out): \d+ models, geometric-mean error x([\d.]+), worst x([\d.]+)", ln))}
    assert set(summary) == {"seen", "held out"}
    for gm, worst in summary.values():
        assert gm <= 1.25 and worst <= 1.6, summary


def test_the_recorded_breakdown_is_read_with_todays_classes(tmp_path):
    """The run's breakdown counted cuDNN's RNN kernels as elementwise (13.7 ms of the LSTM's); read back, they are
    the RNN class, beside the prediction's."""
    out = subprocess.run([sys.executable, "bench/estimator_gpu.py", "--measured", str(RUN), "--classes", "--only",
                          "lstm h1024 fp32,gpt2 bf16 s1024"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"DLRUN_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    lstm = lines[lines.index(next(ln for ln in lines if ln.startswith("lstm h1024 fp32"))) + 1]
    cells = dict(re.findall(r"(\w+) ([\d.]+)/[\d.]+", lstm))
    assert float(cells["rnn"]) > 13 and float(cells["elementwise"]) < 1, lstm
    gpt2 = lines[lines.index(next(ln for ln in lines if ln.startswith("gpt2 bf16 s1024"))) + 1]
    assert float(dict(re.findall(r"(\w+) ([\d.]+)/[\d.]+", gpt2))["attention"]) > 3, gpt2
