"""How well the kernel calibration travels to a GPU without measured kernels (no GPU needed).

Each GPU of configs/catalog/gpu_kernels*.csv is left out in turn, and its measured kernels are predicted from
the other GPUs' fits alone, as dlrun prices a GPU it has no rows for (an L40S, a B200, most GeForce cards).
Two rules, in the same process over the same rows:
  pooled    dlrun's: the geometric mean of every GPU that measured the class (gpu_calibration.pooled_fit)
  nearest   the baseline: the measured GPU of the same architecture nearest in SM count, else the GPU
            with the most measured classes
Printed: per GPU and in all, the geometric-mean error (exp of the mean |log(predicted / measured)|) of each
rule and their ratio; per kernel class the RMS log error of the pooled rule (gpu_calibration.BORROWED_SIGMA
is what this measured on the catalog of 2026-11-27).

    python bench/gpu_transfer.py [--catalog DIR]
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def nearest_of_architecture(spec, key, others):
    """The baseline rule: the nearest measured GPU (by SM count) of `spec`'s architecture that has the class,
    else the measured GPU with the most classes."""
    from infra.catalog import gpu_spec

    having = [(gpu_spec(g), fits) for g, fits in others.items() if key in fits]
    if not having:
        return None
    family = spec.architecture.split()[0]
    same = [(s, f) for s, f in having if s.architecture.split()[0] == family]
    if same:
        return min(same, key=lambda t: abs(math.log(t[0].sm_count / spec.sm_count)))[1][key]
    return max(having, key=lambda t: len(t[1]))[1][key]


def geo_error(logs: list[float]) -> float:
    return math.exp(sum(abs(v) for v in logs) / len(logs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--catalog", type=Path, help="catalog directory (default: configs/catalog)")
    args = ap.parse_args()
    from orchestrator.estimate.gpu_calibration import BORROWED_SIGMA, transfer_errors

    pooled = transfer_errors(args.catalog)
    nearest = transfer_errors(args.catalog, lend=nearest_of_architecture)
    gpus = sorted({g for g, _ in pooled})
    print(f"{'gpu (left out)':16s} {'kernels':>7s} {'pooled':>8s} {'nearest':>8s} {'ratio':>6s}")
    for gpu in gpus:
        p = [v for (g, _), vs in pooled.items() if g == gpu for v in vs]
        n = [v for (g, _), vs in nearest.items() if g == gpu for v in vs]
        print(f"{gpu:16s} {len(p):7d} x{geo_error(p):7.2f} x{geo_error(n):7.2f} {geo_error(p) / geo_error(n):6.2f}")
    p_all = [v for vs in pooled.values() for v in vs]
    n_all = [v for vs in nearest.values() for v in vs]
    worst_p = max(geo_error([v for (g, _), vs in pooled.items() if g == gpu for v in vs]) for gpu in gpus)
    worst_n = max(geo_error([v for (g, _), vs in nearest.items() if g == gpu for v in vs]) for gpu in gpus)
    print(f"{'all':16s} {len(p_all):7d} x{geo_error(p_all):7.2f} x{geo_error(n_all):7.2f} "
          f"{geo_error(p_all) / geo_error(n_all):6.2f}   worst GPU: pooled x{worst_p:.2f}, nearest x{worst_n:.2f}")
    kinds = sorted({k for _, k in pooled})
    for kind in kinds:
        logs = [v for (_, k), vs in pooled.items() if k == kind for v in vs]
        print(f"# {kind}: {len(logs)} kernels, pooled RMS log error {math.sqrt(sum(v * v for v in logs) / len(logs)):.2f}")
    rms = math.sqrt(sum(v * v for v in p_all) / len(p_all))
    print(f"# all classes: pooled RMS log error {rms:.2f} (BORROWED_SIGMA {BORROWED_SIGMA})")


if __name__ == "__main__":
    main()
