"""Learning from finished runs: per (accelerator, model family) corrections of the step time, per accelerator of the
start-up term, and how many runs each rests on (they narrow an estimate's range)."""
from __future__ import annotations

import math
import statistics

MIN_CORRECTION, MAX_CORRECTION = 0.2, 5.0


def correction_for(history, accelerator: str, family: str) -> float:
    if not history:
        return 1.0
    return history.get((accelerator, family), 1.0)


def startup_correction_for(history, accelerator: str, family: str) -> float:
    """The start-up term's correction (one per accelerator: the start is the machine's, whatever the
    model); where finished runs say nothing about it, the step's."""
    known = history.startup if isinstance(history, History) else {}
    key = _accelerator_key(accelerator)
    return known[key] if key in known else correction_for(history, accelerator, family)


def runs_behind(history, accelerator: str, family: str) -> int:
    """How many finished runs the correction of (accelerator, family) rests on: each narrows the range."""
    return history.runs.get((_accelerator_key(accelerator), family), 0) if isinstance(history, History) else 0


def _damped(ratios: list[float]) -> float:
    """Median ratio, pulled toward 1 while there are few runs (one odd run must not swing it)."""
    if not ratios:
        return 1.0
    weight = len(ratios) / (len(ratios) + 1)
    factor = math.exp(weight * math.log(statistics.median(ratios)))
    return min(MAX_CORRECTION, max(MIN_CORRECTION, factor))


def _accelerator_key(accelerator: str | None) -> str:
    """The store records a CPU run as 'CPU', the estimator says 'cpu'."""
    return "cpu" if not accelerator or accelerator.upper() == "CPU" else accelerator


class History(dict):
    """(accelerator, model_family) -> step-time correction; .startup: accelerator -> start-up correction;
    .runs: (accelerator, model_family) -> the finished runs behind it."""

    def __init__(self, steps=(), startup=None, runs=None):
        super().__init__(steps)
        self.startup = dict(startup or {})
        self.runs = dict(runs or {})


# how much the prior (both corrections 1) counts against the runs, each run weighing 1: little, since
# the start-up is one constant of the machine that a single small run already shows (0.05: one run
# moves a 2.5x start-up error to ~2.1x, three to ~2.3x)
STARTUP_PRIOR_WEIGHT = 0.05


def _gauss(m: list[list[float]], b: list[float]) -> list[float]:
    """Solve m·x = b (small, symmetric positive definite: no pivoting needed beyond the diagonal)."""
    n = len(b)
    m, b = [r[:] for r in m], b[:]
    for i in range(n):
        for k in range(i + 1, n):
            f = m[k][i] / m[i][i]
            for j in range(i, n):
                m[k][j] -= f * m[i][j]
            b[k] -= f * b[i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (b[i] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def _clamp(v: float) -> float:
    return min(MAX_CORRECTION, max(MIN_CORRECTION, v))


def _solve(obs: list[tuple[str, float, float, float]]) -> tuple[float | None, dict[str, float]]:
    """From one accelerator's runs (family, raw start, raw training, actual): the start-up correction s,
    shared by every family (the start is the machine's), and a step correction c per family. Least
    squares on actual ≈ s·start + c_family·training in relative terms, pulled toward 1. Without any
    recorded start-up term: no s, and each family's c is the damped median ratio as before."""
    families = sorted({f for f, _, _, _ in obs})
    if not any(start > 0 for _, start, _, _ in obs):
        return None, {f: _damped([a / t for g, _, t, a in obs if g == f and t > 0]) for f in families}
    col = {f: i + 1 for i, f in enumerate(families)}
    n, lam = len(families) + 1, STARTUP_PRIOR_WEIGHT
    m, b = [[0.0] * n for _ in range(n)], [lam] * n
    for i in range(n):
        m[i][i] = lam
    for family, start, train, actual in obs:
        x = [0.0] * n
        x[0], x[col[family]] = start / actual, train / actual
        for i in range(n):
            b[i] += x[i]
            for j in range(n):
                m[i][j] += x[i] * x[j]
    sol = _gauss(m, b)
    return _clamp(sol[0]), {f: _clamp(sol[col[f]]) for f in families}


def fit_terms(runs) -> History:
    """runs: (accelerator, family, est_run_seconds, actual_run_seconds, est_start_seconds or None), in
    time order. A run that recorded its start-up term corrects both terms; the others the step only.
    Replaying in order turns each recorded (corrected) estimate back into the model's raw terms."""
    obs: dict[str, list[tuple[str, float, float, float]]] = {}
    for accelerator, family, est, actual, est_start in runs:
        if not est or not actual or est <= 0 or actual <= 0:
            continue
        seen = obs.setdefault(_accelerator_key(accelerator), [])
        family = family or "unknown"
        s_then, c_then = _solve(seen) if seen else (None, {})
        start = min(est_start or 0.0, est)
        seen.append((family, start / (s_then or 1.0), (est - start) / c_then.get(family, 1.0), actual))
    steps, startup, counts = {}, {}, {}
    for accelerator, seen in obs.items():
        s, c = _solve(seen)
        steps.update({(accelerator, f): v for f, v in c.items()})
        for family, *_ in seen:
            counts[(accelerator, family)] = counts.get((accelerator, family), 0) + 1
        if s is not None:
            startup[accelerator] = s
    return History(steps, startup, counts)


def history_from_store(store) -> History:
    """Correction factors per (accelerator, model_family) from the store's finished jobs."""
    return fit_terms((j.accelerator, j.model_family, j.est_run_seconds, j.actual_run_seconds, j.est_start_seconds)
                     for j in store.finished_runs())
