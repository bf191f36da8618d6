"""dlrun's local head (infra/local/head.py) when its start is slow and its first try fails, made so at the
process boundary (tests/support/slow_ray.py through DLRUN_RAY_BIN, the real Ray behind it): the wait says how
long it has waited, the failed try is stopped whole before the next (its processes, also one that left the
group, and its temp dir), and the head that comes up answers dlrun's authenticated Jobs API requests."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from infra.reach import PROGRESS_EVERY_S, free_port, jobs_api_answers
from tests.support.slow_ray import runs, slow_ray

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray
START = ("import json; from infra.local.head import ensure_local_head; "
         "h = ensure_local_head(progress=lambda line: print('PROGRESS', line, flush=True)); "
         "print('HEAD', json.dumps({'pgid': h.pgid, 'url': h.dashboard_url, 'token': h.token_path}))")


def gone(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_slow_head_whose_first_try_failed_comes_up_clean(dlrun_home, tmp_path):
    real = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    ray = slow_ray(tmp_path / "bin", real, delay_s=PROGRESS_EVERY_S + 2, fail_first=True)
    env = dict(os.environ, DLRUN_HOME=str(dlrun_home), DLRUN_RAY_BIN=str(ray), RAY_USAGE_STATS_ENABLED="0",
               DLRUN_DASHBOARD_PORT=str(free_port()))
    env.pop("DLRUN_RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=240)
    head = json.loads(r.stdout.split("HEAD ", 1)[1]) if "HEAD " in r.stdout else None
    try:
        assert r.returncode == 0 and head, r.stdout + r.stderr[-3000:]
        progress = [line for line in r.stdout.splitlines() if line.startswith("PROGRESS")]
        assert "The current node timed out during startup" in progress[0] and "try 2 of 3" in progress[0]
        assert any("waiting for the local Ray head to answer" in line for line in progress[1:])
        (_, first_dir, stray, group), (_, second_dir, _, _) = runs(ray)
        assert not Path(first_dir).exists() and Path(second_dir).exists()
        assert gone(stray) and gone(group)
        token = Path(head["token"]).read_text().strip()
        assert jobs_api_answers(head["url"], {"Authorization": f"Bearer {token}"})
        with pytest.raises(urllib.error.HTTPError) as refused:  # and nobody else's
            urllib.request.urlopen(f"{head['url']}/api/jobs/", timeout=5)
        assert refused.value.code in (401, 403)
    finally:
        down = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "down"], capture_output=True,
                              text=True, cwd=ROOT, env=env, timeout=60)
        assert head is None or f"process group {head['pgid']}" in down.stdout
