"""`dlrun cost-report` and `dlrun dashboard`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import click

from orchestrator.errors import UsageError


def cost_rows(store) -> list[dict]:
    from orchestrator.cli.status import accrued_cost

    rows = []
    for r in store.list_jobs(limit=100000):
        rows.append({
            "job": r["id"], "name": r["name"], "day": time.strftime("%Y-%m-%d", time.localtime(r["created_at"])),
            "status": r["status"], "backend": r["backend"], "instance": r["instance_type"],
            "gpu": r["accelerator"], "spot": bool(r["spot"]), "preemptions": r["preemptions"],
            "est_hours": (r["est_seconds"] or 0) / 3600, "actual_hours": (r["actual_seconds"] or 0) / 3600,
            "est_cost": r["est_cost"] or 0.0, "actual_cost": round(accrued_cost(store, r), 6),
            "schedule": r["schedule_id"],
        })
    return rows


@click.command("cost-report")
@click.option("--json", "as_json", is_flag=True)
def cost_report(as_json):
    """Per job and per day: backend, GPU, spot, preemptions, estimated vs actual hours and $."""
    from orchestrator.state.db import default_store

    rows = cost_rows(default_store())
    days: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "est_cost": 0.0, "actual_cost": 0.0})
    for r in rows:
        d = days[r["day"]]
        d["jobs"] += 1
        d["est_cost"] += r["est_cost"]
        d["actual_cost"] += r["actual_cost"]
    total = {"jobs": len(rows), "est_cost": sum(r["est_cost"] for r in rows),
             "actual_cost": sum(r["actual_cost"] for r in rows)}
    if as_json:
        click.echo(json.dumps({"jobs": rows, "days": days, "total": total}, indent=2))
        return
    from rich.table import Table

    from orchestrator.cli.render.summary import console

    t = Table(title="dlrun cost report (USD)")
    for c in ("day", "job", "name", "status", "backend", "gpu", "spot", "preempt", "est h", "actual h",
              "est $", "actual $"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["day"], r["job"], r["name"], r["status"], r["backend"] or "-", r["gpu"] or "-",
                  "yes" if r["spot"] else "no", str(r["preemptions"]), f"{r['est_hours']:.4f}",
                  f"{r['actual_hours']:.4f}", f"{r['est_cost']:.4f}", f"{r['actual_cost']:.4f}")
    from orchestrator.cli.render.summary import plural

    for day, d in sorted(days.items()):
        t.add_row(day, f"[bold]{plural(d['jobs'], 'job')}[/]", "", "", "", "", "", "", "", "",
                  f"{d['est_cost']:.4f}", f"[bold]{d['actual_cost']:.4f}[/]")
    t.add_row("total", f"[bold]{plural(total['jobs'], 'job')}[/]", "", "", "", "", "", "", "", "",
              f"{total['est_cost']:.4f}", f"[bold]{total['actual_cost']:.4f}[/]")
    console().print(t)


@click.command()
@click.argument("job_id", required=False)
@click.option("--open", "open_browser", is_flag=True, help="open it in a browser")
@click.option("--metrics", is_flag=True, help="also start Prometheus and Grafana when installed")
@click.option("--no-login", is_flag=True, help="print the plain dashboard URL (the browser asks for the token)")
def dashboard(job_id, open_browser, metrics, no_login):
    """The Ray dashboard URL of JOB's cluster (local, or through an SSH tunnel to a cloud head).

    Prints a one-use link that logs the browser in (the cluster's Ray token, as the dashboard's own
    cookie) and lands on the dashboard; it waits until the link is opened (5 minutes at most)."""
    import json as _json

    from infra import capabilities
    from orchestrator.state.db import default_store

    store = default_store()
    tunnel, base = None, None
    if job_id:
        row = store.get_job(job_id)
        if row is None:
            raise UsageError(f"no job '{job_id}'; `dlrun status` lists them")
        url = row["ray_address"]
        cluster = store.get_cluster(row["cluster_id"]) if row["cluster_id"] else None
        if row["backend"] and capabilities(row["backend"]).remote:
            if not cluster or cluster["state"] == "terminated" or not cluster["cluster_json"]:
                raise UsageError(f"job {row['id']}'s cluster is gone; its record: `dlrun status {row['id']}`")
            from infra import get_provider
            from infra.base import Cluster

            tunnel = get_provider(row["backend"]).connect(Cluster.from_dict(_json.loads(cluster["cluster_json"])))
            url = tunnel.address
        base = url
        if url:
            url = f"{url}/#/jobs/{row['ray_submission_id']}" if row["ray_submission_id"] else url
    else:
        from orchestrator.runs.teardown import local_head

        url, ours = local_head()
        base = url
        if url and not ours:
            click.echo("(a Ray head dlrun did not start; dlrun attaches to it for local jobs)", err=True)
    if not url:
        raise UsageError("no Ray dashboard is up: no local Ray head answers; `dlrun submit` starts one")
    login = None if no_login else _login_link(url, tunnel.headers if tunnel else None, base)
    click.echo(login.url if login else url)
    if login:
        click.echo(f"(a one-use link that logs this browser in and opens {url}; it waits up to "
                   f"{login.ttl_s / 60:.0f} minutes for it, Ctrl-C stops)", err=True)
    if metrics:
        for line in start_metrics_stack():
            click.echo(line)
    if open_browser:
        import webbrowser

        webbrowser.open(login.url if login else url)
    if login is not None and tunnel is None:
        try:
            login.wait()
        except KeyboardInterrupt:
            pass
        finally:
            login.close()
    if tunnel is not None:
        click.echo("(tunnel open; Ctrl-C closes it)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            tunnel.close()


def _login_link(url: str, headers: dict | None, base: str):
    """A started LoginLink to url with the token dlrun holds for that head (a cloud cluster's, or its own
    local head's), or None: a head dlrun did not start (its token is the user's business), or one
    elsewhere than this machine's loopback."""
    from infra.local.head import local_head_headers
    from infra.login import LoginLink, can_log_in

    if headers is None:
        headers = local_head_headers(base)
    token = (headers or {}).get("Authorization", "").removeprefix("Bearer ").strip()
    if not token or not can_log_in(url):
        return None
    return LoginLink(url, token).start()


PROMETHEUS_PORT = 9090  # where the Ray dashboard looks for them by default (RAY_PROMETHEUS_HOST,
GRAFANA_PORT = 3000  # RAY_GRAFANA_HOST), so its time-series charts appear once they are up
GRAFANA_INSTALL = "https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/"


def ray_temp_dir() -> Path:
    """Ray's temp root, as Ray computes it (RAY_TMPDIR, else TMPDIR on Linux, else /tmp) + /ray."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux")
                                            else None) or "/tmp"
    return Path(base) / "ray"


def ray_session_dir(head=None) -> Path | None:
    """The session directory of dlrun's local head (Ray names it session_<time>_<pid of `ray start`>,
    which is the process group dlrun recorded); session_latest for a head dlrun did not start."""
    if head is None:
        from infra.local.head import recorded_head

        head = recorded_head()
    root = Path(getattr(head, "temp_dir", None) or ray_temp_dir())  # a head may have its own --temp-dir
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
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen([prom, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
                                 f"--storage.tsdb.path={data_dir}"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        if log_path:
            log.close()


def _wait_ready(proc: subprocess.Popen, url: str, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _answers(url):
            return True
        time.sleep(0.25)
    return False


def start_metrics_stack() -> list[str]:
    """Start Prometheus and Grafana from the system's packages with the configs Ray generated in the
    local head's session directory. One line per component: its URL, or how to install it."""
    from infra.reach import port_free
    from orchestrator.state.db import dlrun_home

    session = ray_session_dir()
    if session is None:
        return ["metrics: no local Ray session found; `dlrun submit` starts the local head"]
    home = dlrun_home()
    out, started = [], {}

    prom_url = f"http://127.0.0.1:{PROMETHEUS_PORT}"
    prom_cfg = session / "metrics" / "prometheus" / "prometheus.yml"
    prom = shutil.which("prometheus")
    if _answers(f"{prom_url}/-/ready"):
        out.append(f"prometheus: already running at {prom_url}")
    elif not prom:
        out.append("prometheus: not installed (Debian/Ubuntu: sudo apt-get install prometheus), "
                   "then run `dlrun dashboard --metrics` again")
    elif not prom_cfg.exists():
        out.append(f"prometheus: Ray wrote no config at {prom_cfg}")
    elif not port_free(PROMETHEUS_PORT):
        out.append(f"prometheus: port {PROMETHEUS_PORT} is taken by something else; the Ray dashboard "
                   "looks for Prometheus there (RAY_PROMETHEUS_HOST)")
    else:
        log = home / "prometheus.log"
        proc = start_prometheus(prom_cfg, data_dir=home / "prometheus", log_path=log, prometheus=prom)
        if _wait_ready(proc, f"{prom_url}/-/ready"):
            started["prometheus"] = proc.pid
            out.append(f"prometheus: {prom_url} (pid {proc.pid}, config {prom_cfg}, log {log})")
        else:
            out.append(f"prometheus: did not start (exit code {proc.poll()}); see {log}")

    graf_url = f"http://127.0.0.1:{GRAFANA_PORT}"
    graf_ini = session / "metrics" / "grafana" / "grafana.ini"
    graf = shutil.which("grafana-server") or shutil.which("grafana")
    if _answers(f"{graf_url}/api/health"):
        out.append(f"grafana: already running at {graf_url}")
    elif not graf:
        out.append(f"grafana: not installed (optional, for the dashboard's charts; Debian: {GRAFANA_INSTALL})")
    elif not graf_ini.exists():
        out.append(f"grafana: Ray wrote no config at {graf_ini}")
    elif not port_free(GRAFANA_PORT):
        out.append(f"grafana: port {GRAFANA_PORT} is taken by something else (RAY_GRAFANA_HOST)")
    else:
        cmd = [graf] if Path(graf).name == "grafana-server" else [graf, "server"]
        cmd += ["--config", str(graf_ini)]
        for homepath in ("/usr/share/grafana", "/usr/local/share/grafana"):
            if Path(homepath).is_dir():
                cmd += ["--homepath", homepath]
                break
        data = home / "grafana"
        (data / "logs").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, GF_PATHS_DATA=str(data), GF_PATHS_LOGS=str(data / "logs"),
                   GF_SERVER_HTTP_ADDR="127.0.0.1", GF_SERVER_HTTP_PORT=str(GRAFANA_PORT))
        log = home / "grafana.log"
        with open(log, "ab") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
        if _wait_ready(proc, f"{graf_url}/api/health", timeout=30.0):
            started["grafana"] = proc.pid
            out.append(f"grafana: {graf_url} (pid {proc.pid}, config {graf_ini}, log {log})")
        else:
            out.append(f"grafana: did not start (exit code {proc.poll()}); see {log}")

    if started:
        (home / "metrics_stack.json").write_text(json.dumps({**started, "session": str(session)}))
        out.append("refresh the Ray dashboard to see its charts; stop them with: kill "
                   + " ".join(str(p) for p in started.values()))
    return out
