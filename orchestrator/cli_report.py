"""`dlrun cost-report` and `dlrun dashboard`."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import defaultdict

import click

from orchestrator.errors import UsageError


def cost_rows(store) -> list[dict]:
    from orchestrator.status import accrued_cost

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
    from orchestrator.store import default_store

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
    from rich.console import Console
    from rich.table import Table

    t = Table(title="dlrun cost report (USD)")
    for c in ("day", "job", "name", "status", "backend", "gpu", "spot", "preempt", "est h", "actual h",
              "est $", "actual $"):
        t.add_column(c)
    for r in rows:
        t.add_row(r["day"], r["job"], r["name"], r["status"], r["backend"] or "-", r["gpu"] or "-",
                  "yes" if r["spot"] else "no", str(r["preemptions"]), f"{r['est_hours']:.4f}",
                  f"{r['actual_hours']:.4f}", f"{r['est_cost']:.4f}", f"{r['actual_cost']:.4f}")
    for day, d in sorted(days.items()):
        t.add_row(day, f"[bold]{d['jobs']} jobs[/]", "", "", "", "", "", "", "", "",
                  f"{d['est_cost']:.4f}", f"[bold]{d['actual_cost']:.4f}[/]")
    t.add_row("total", f"[bold]{total['jobs']} jobs[/]", "", "", "", "", "", "", "", "",
              f"{total['est_cost']:.4f}", f"[bold]{total['actual_cost']:.4f}[/]")
    Console().print(t)


@click.command()
@click.argument("job_id", required=False)
@click.option("--open", "open_browser", is_flag=True, help="open it in a browser")
@click.option("--metrics", is_flag=True, help="also start Prometheus and Grafana when installed")
def dashboard(job_id, open_browser, metrics):
    """The Ray dashboard URL of JOB's cluster (local, or through an SSH tunnel to a cloud head)."""
    import json as _json

    from orchestrator.raycluster import recorded_head
    from orchestrator.store import default_store

    store = default_store()
    tunnel = None
    if job_id:
        row = store.get_job(job_id)
        if row is None:
            raise UsageError(f"no job '{job_id}'; `dlrun status` lists them")
        url = row["ray_address"]
        cluster = store.get_cluster(row["cluster_id"]) if row["cluster_id"] else None
        if row["backend"] not in (None, "local"):
            if not cluster or cluster["state"] == "terminated" or not cluster["cluster_json"]:
                raise UsageError(f"job {row['id']}'s cluster is gone; its record: `dlrun status {row['id']}`")
            from infra.base import Cluster
            from infra.ssh import open_tunnel

            tunnel = open_tunnel(Cluster.from_dict(_json.loads(cluster["cluster_json"])), 8265)
            url = tunnel.local_address
        if url:
            url = f"{url}/#/jobs/{row['ray_submission_id']}" if row["ray_submission_id"] else url
    else:
        head = recorded_head()
        url = head.dashboard_url if head else None
    if not url:
        raise UsageError("no Ray dashboard is up; `dlrun submit` starts the local head")
    click.echo(url)
    if metrics:
        for line in start_metrics_stack():
            click.echo(line)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    if tunnel is not None:
        click.echo("(tunnel open; Ctrl-C closes it)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            tunnel.close()


def start_metrics_stack() -> list[str]:
    """Start Prometheus and Grafana from the system's packages with Ray's generated configs."""
    out = []
    prom = shutil.which("prometheus")
    cfg = "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml"
    if prom:
        subprocess.Popen([prom, f"--config.file={cfg}", "--web.listen-address=127.0.0.1:9090"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        out.append("prometheus: http://127.0.0.1:9090")
    else:
        out.append("prometheus not installed (Debian: apt-get install prometheus)")
    graf = shutil.which("grafana-server") or shutil.which("grafana")
    if graf:
        out.append("grafana: start it with --config /tmp/ray/session_latest/metrics/grafana/grafana.ini")
    else:
        out.append("grafana not installed (see grafana.com/docs for the Debian package)")
    return out
