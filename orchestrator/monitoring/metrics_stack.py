"""Prometheus and Grafana from the system's packages, started with the configs Ray generated in the
local head's session directory (`dlrun dashboard --metrics`), so the dashboard's time-series charts appear."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.settings import env_path

if TYPE_CHECKING:
    from infra.local.head import LocalHead

PROMETHEUS_PORT = 9090  # where the Ray dashboard looks for them by default (RAY_PROMETHEUS_HOST,
GRAFANA_PORT = 3000  # RAY_GRAFANA_HOST), so its time-series charts appear once they are up
GRAFANA_INSTALL = "https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/"


def ray_temp_dir() -> Path:
    """Ray's temp root, as Ray computes it (RAY_TMPDIR, else TMPDIR on Linux, else /tmp) + /ray."""
    base = env_path("RAY_TMPDIR") or (env_path("TMPDIR") if sys.platform.startswith("linux") else None) or "/tmp"
    return Path(base) / "ray"


def ray_session_dir(head: LocalHead | None = None) -> Path | None:
    """The session directory of dlrun's local head (Ray names it session_<time>_<pid of `ray start`>,
    which is the process group dlrun recorded); session_latest for a head dlrun did not start."""
    if head is None:
        from infra.local.head import recorded_head

        head = recorded_head()
    root = Path((head.temp_dir if head is not None else None) or ray_temp_dir())  # its own --temp-dir, if any
    if head is not None and head.pgid:
        mine = sorted(root.glob(f"session_*_{head.pgid}"), key=lambda p: p.stat().st_mtime)
        if mine:
            return mine[-1]
    latest = root / "session_latest"
    return latest.resolve() if latest.exists() else None


def _answers(url: str, timeout: float = 1.0) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except Exception:
        return False


def start_prometheus(config: Path, *, data_dir: Path, port: int = PROMETHEUS_PORT,
                     log_path: Path | None = None, prometheus: str | None = None) -> subprocess.Popen:
    """Prometheus on 127.0.0.1:port with Ray's generated config (it scrapes every Ray node's metrics
    endpoint through the session's service-discovery file), in its own session."""
    prom = prometheus or shutil.which("prometheus")
    if not prom:
        raise FileNotFoundError("prometheus")
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [prom, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
           f"--storage.tsdb.path={data_dir}"]
    return _start_detached(cmd, log_path)


def start_grafana(grafana: str, ini: Path, *, data_dir: Path, log_path: Path,
                  port: int = GRAFANA_PORT) -> subprocess.Popen:
    """grafana-server (or `grafana server`) on 127.0.0.1:port with Ray's generated grafana.ini, its data
    and logs under data_dir, in its own session."""
    cmd = [grafana] if Path(grafana).name == "grafana-server" else [grafana, "server"]
    cmd += ["--config", str(ini)]
    for homepath in ("/usr/share/grafana", "/usr/local/share/grafana"):
        if Path(homepath).is_dir():
            cmd += ["--homepath", homepath]
            break
    (data_dir / "logs").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GF_PATHS_DATA=str(data_dir), GF_PATHS_LOGS=str(data_dir / "logs"),
               GF_SERVER_HTTP_ADDR="127.0.0.1", GF_SERVER_HTTP_PORT=str(port))
    return _start_detached(cmd, log_path, env)


def _start_detached(cmd: list[str], log_path: Path | None, env: dict[str, str] | None = None) -> subprocess.Popen:
    """cmd in its own session, its output appended to log_path (or dropped)."""
    if log_path is None:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)


def _wait_ready(proc: subprocess.Popen, url: str, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _answers(url):
            return True
        time.sleep(0.25)
    return False


def _prometheus(session: Path, home: Path, started: dict[str, int]) -> str:
    """Prometheus up (or already up) for this session: its line."""
    from infra.reach import port_free

    url = f"http://127.0.0.1:{PROMETHEUS_PORT}"
    cfg = session / "metrics" / "prometheus" / "prometheus.yml"
    prom = shutil.which("prometheus")
    if _answers(f"{url}/-/ready"):
        return f"prometheus: already running at {url}"
    if not prom:
        return ("prometheus: not installed (Debian/Ubuntu: sudo apt-get install prometheus), "
                "then run `dlrun dashboard --metrics` again")
    if not cfg.exists():
        return f"prometheus: Ray wrote no config at {cfg}"
    if not port_free(PROMETHEUS_PORT):
        return (f"prometheus: port {PROMETHEUS_PORT} is taken by something else; the Ray dashboard "
                "looks for Prometheus there (RAY_PROMETHEUS_HOST)")
    log = home / "prometheus.log"
    proc = start_prometheus(cfg, data_dir=home / "prometheus", log_path=log, prometheus=prom)
    if not _wait_ready(proc, f"{url}/-/ready"):
        return f"prometheus: did not start (exit code {proc.poll()}); see {log}"
    started["prometheus"] = proc.pid
    return f"prometheus: {url} (pid {proc.pid}, config {cfg}, log {log})"


def _grafana(session: Path, home: Path, started: dict[str, int]) -> str:
    """Grafana up (or already up) for this session: its line."""
    from infra.reach import port_free

    url = f"http://127.0.0.1:{GRAFANA_PORT}"
    ini = session / "metrics" / "grafana" / "grafana.ini"
    graf = shutil.which("grafana-server") or shutil.which("grafana")
    if _answers(f"{url}/api/health"):
        return f"grafana: already running at {url}"
    if not graf:
        return f"grafana: not installed (optional, for the dashboard's charts; Debian: {GRAFANA_INSTALL})"
    if not ini.exists():
        return f"grafana: Ray wrote no config at {ini}"
    if not port_free(GRAFANA_PORT):
        return f"grafana: port {GRAFANA_PORT} is taken by something else (RAY_GRAFANA_HOST)"
    log = home / "grafana.log"
    proc = start_grafana(graf, ini, data_dir=home / "grafana", log_path=log)
    if not _wait_ready(proc, f"{url}/api/health", timeout=30.0):
        return f"grafana: did not start (exit code {proc.poll()}); see {log}"
    started["grafana"] = proc.pid
    return f"grafana: {url} (pid {proc.pid}, config {ini}, log {log})"


def start_metrics_stack() -> list[str]:
    """Start Prometheus and Grafana from the system's packages with the configs Ray generated in the
    local head's session directory. One line per component: its URL, or how to install it."""
    from orchestrator.paths import dlrun_home

    session = ray_session_dir()
    if session is None:
        return ["metrics: no local Ray session found; `dlrun submit` starts the local head"]
    home = dlrun_home()
    started: dict[str, int] = {}
    out = [_prometheus(session, home, started), _grafana(session, home, started)]
    if started:
        (home / "metrics_stack.json").write_text(json.dumps({**started, "session": str(session)}))
        out.append("refresh the Ray dashboard to see its charts; stop them with: kill "
                   + " ".join(str(p) for p in started.values()))
    return out
