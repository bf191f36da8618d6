"""Progress reporting that any training script can use: `from jobs.metrics import report`.

Every call prints one line to stdout, flushed, which the dlrun runner parses from the job's log:

    DLRUN_METRIC {"epoch":3,"epochs":20,"loss":0.41,...}   <- report(epoch=3, epochs=20, ...)
    DLRUN_METRIC {"event":"resumed","epoch":2}             <- report_event("resumed", epoch=2)
    DLRUN_RESULT {"accuracy":0.97,...}                     <- report_result(accuracy=0.97, ...)

How far the run is: `epoch`/`epochs`, or `step`/`steps`, or `progress` (the share of the whole run
done, 0-1), with `samples_per_s` when known. dlrun times a job that has no `workload:` by a short
local probe run (DLRUN_PROBE=1 is set, see probing()) and reads these keys; report at least every
few seconds (e.g. every N steps while probing) so the probe sees the rate.

Inside a Ray job (RAY_ADDRESS set, or Ray already initialised, e.g. in a Ray Train worker) the
numeric values are also published as ray.util.metrics gauges (dlrun_epoch, dlrun_loss,
dlrun_accuracy, dlrun_samples_per_second, dlrun_gpu_utilization, dlrun_gpu_memory_bytes,
dlrun_accrued_cost when DLRUN_PRICE_PER_HOUR is set; dlrun_progress, dlrun_eta_seconds and
dlrun_learning_rate from what jobs/tee.py reads in a script's own output) tagged with job_id=$DLRUN_JOB_ID, so they show
in the Ray dashboard (Prometheus names get Ray's prefix: ray_dlrun_loss{job_id="..."}). Ray
exports a gauge's value only in the export (every 10 s) after it was set, then drops it, so the last
values are set again every REFRESH_S until the process ends: a Prometheus scraping every 10 s sees
each value, not one epoch in a few. Set DLRUN_METRICS_FLUSH_S=11 to keep a short job alive long
enough for its last values to be exported and scraped. Ray is imported lazily; without it (or when
it cannot connect) only the lines are printed.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time

METRIC_PREFIX = "DLRUN_METRIC "
RESULT_PREFIX = "DLRUN_RESULT "
JOB_ID_ENV = "DLRUN_JOB_ID"
PRICE_ENV = "DLRUN_PRICE_PER_HOUR"
# Ray exports gauges every metrics_report_interval_ms (10 s by default), so a short job can end
# before its last values are exported; this many seconds of waiting after the result fixes that.
FLUSH_ENV = "DLRUN_METRICS_FLUSH_S"
PROBE_ENV = "DLRUN_PROBE"  # set to 1 while dlrun times the job with a short local run

# metric key in the DLRUN_METRIC line -> Ray gauge name
GAUGES = {
    "epoch": "dlrun_epoch",
    "loss": "dlrun_loss",
    "accuracy": "dlrun_accuracy",
    "samples_per_s": "dlrun_samples_per_second",
    "gpu_utilization": "dlrun_gpu_utilization",
    "gpu_memory_bytes": "dlrun_gpu_memory_bytes",
    "accrued_cost": "dlrun_accrued_cost",
    # what jobs/tee.py reads from a job's own output (jobs/progress.py)
    "progress": "dlrun_progress",
    "eta_s": "dlrun_eta_seconds",
    "lr": "dlrun_learning_rate",
}

REFRESH_S = 1.0  # how often the last values are set again (under Ray's shortest export interval in use)

_started = time.time()
_gauges: dict | None = None  # None: not tried yet; {}: Ray unavailable, print only
_last: dict[str, float] = {}  # gauge key -> last value set, set again by the refresher
_last_lock = threading.Lock()


def report(**metrics) -> None:
    """One epoch's metrics: epoch, epochs, loss, val_loss, accuracy, samples_per_s, elapsed_s."""
    metrics.update(_gpu_stats())
    _emit(METRIC_PREFIX, metrics)
    publish(metrics)


def probing() -> bool:
    """True while dlrun runs the job briefly to time it (DLRUN_PROBE=1): a good moment to report often."""
    return os.environ.get(PROBE_ENV) == "1"


def report_event(event: str, **fields) -> None:
    """A lifecycle event, e.g. report_event("resumed", epoch=4)."""
    _emit(METRIC_PREFIX, {"event": event, **fields})


def report_result(**metrics) -> None:
    """The final metrics of the run (printed once, at the end)."""
    _emit(RESULT_PREFIX, metrics)
    if _gauges:
        try:
            time.sleep(max(0.0, float(os.environ.get(FLUSH_ENV) or 0)))
        except ValueError:
            pass


def parse_line(line: str) -> tuple[str, dict] | None:
    """("metric" | "result", payload) for a reporting line (a log prefix before it is allowed)."""
    for kind, prefix in (("metric", METRIC_PREFIX), ("result", RESULT_PREFIX)):
        at = line.find(prefix)
        if at >= 0:
            try:
                payload = json.loads(line[at + len(prefix):])
            except ValueError:
                return None
            return (kind, payload) if isinstance(payload, dict) else None
    return None


def _emit(prefix: str, payload: dict) -> None:
    sys.stdout.write(prefix + json.dumps(payload, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _gpu_stats() -> dict:
    torch = sys.modules.get("torch")  # never import torch just for this
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    stats: dict[str, float] = {"gpu_memory_bytes": int(torch.cuda.memory_reserved())}
    try:
        stats["gpu_utilization"] = float(torch.cuda.utilization())  # needs nvidia-ml-py
    except Exception:
        pass
    return stats


def _ray_gauges() -> dict:
    global _gauges
    if _gauges is not None:
        return _gauges
    _gauges = {}
    ray = sys.modules.get("ray")
    in_ray = ray is not None and ray.is_initialized()
    if not in_ray and not os.environ.get("RAY_ADDRESS"):
        return _gauges
    try:
        import ray
        from ray.util.metrics import Gauge

        if not ray.is_initialized():
            ray.init(ignore_reinit_error=True, log_to_driver=False,
                     logging_level=logging.WARNING)
        tags = {"job_id": os.environ.get(JOB_ID_ENV) or "unknown"}
        for key, name in GAUGES.items():
            gauge = Gauge(name, description=f"dlrun training {key}", tag_keys=("job_id",))
            gauge.set_default_tags(tags)
            _gauges[key] = gauge
        threading.Thread(target=_refresh_forever, name="dlrun-gauges-refresh", daemon=True).start()
    except Exception as e:  # Ray missing or unreachable: the printed lines still carry it all
        print(f"dlrun metrics: Ray gauges unavailable ({type(e).__name__}: {e})",
              file=sys.stderr, flush=True)
        _gauges = {}
    return _gauges


def publish(metrics: dict) -> None:
    """Set the Ray gauges (GAUGES) of these values, when inside a Ray job; nothing is printed."""
    gauges = _ray_gauges()
    if not gauges:
        return
    with _last_lock:
        _last.update({key: float(value) for key, value in metrics.items()
                      if key in gauges and isinstance(value, (int, float)) and math.isfinite(value)})
    _set_last(gauges)


def _set_last(gauges: dict) -> None:
    """Set every gauge to its last value (the accrued cost to what the run has cost until now)."""
    with _last_lock:
        values = dict(_last)
    price = os.environ.get(PRICE_ENV)
    if price:
        try:
            values["accrued_cost"] = float(price) * (time.time() - _started) / 3600.0
        except ValueError:
            pass
    for key, value in values.items():
        try:
            gauges[key].set(value)
        except Exception:
            pass


def _refresh_forever() -> None:
    while True:
        time.sleep(REFRESH_S)
        if _last and _gauges:
            _set_last(_gauges)
