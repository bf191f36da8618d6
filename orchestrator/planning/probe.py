"""This machine's compute and memory speed, measured once (a 0.5 s torch probe) and cached."""
from __future__ import annotations

import json
import os
import platform
import time

from orchestrator.paths import profiles_dir


def cpu_probe(*, refresh: bool = False) -> dict:
    """This machine's fp32 matmul GFLOP/s and copy bandwidth (GB/s), cached per machine and threads."""
    key = f"{platform.node()}-{os.cpu_count()}-{os.environ.get('OMP_NUM_THREADS', '')}"
    path = profiles_dir() / "cpu_probe.json"
    if path.exists() and not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("key") == key:
                return data
        except ValueError:
            pass
    import torch

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.mm(a, b)  # warm-up
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        torch.mm(a, b)
        reps += 1
    gflops = 2 * 1024**3 * reps / (time.perf_counter() - t0) / 1e9
    src = torch.randn(8 * 1024 * 1024)
    dst = torch.empty_like(src)
    dst.copy_(src)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        dst.copy_(src)
        reps += 1
    gbps = 2 * src.numel() * 4 * reps / (time.perf_counter() - t0) / 1e9
    data = {"key": key, "matmul_gflops": round(gflops, 1), "copy_gbps": round(gbps, 1),
            "threads": torch.get_num_threads(), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    path.write_text(json.dumps(data))
    return data
