"""`dlrun submit` on this machine when Ray's head never starts (a `ray` that fails as Ray's own start-up
deadline fails it, tests/support/slow_ray.py, through DLRUN_RAY_BIN): one line that says why and where the
log is, exit 5 (README's table), and nothing left of any try (processes, temp dirs). No real Ray head."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from orchestrator.errors import EXIT_PROVISIONING
from tests.support.job_files import local_script_job
from tests.support.slow_ray import slow_ray, runs

ROOT = Path(__file__).resolve().parents[2]


def gone(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is dead (init reaps it)


def test_a_head_that_never_starts_is_one_line_with_its_log_and_leaves_nothing(tmp_path):
    ray = slow_ray(tmp_path / "bin", shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray",
                   always_fail=True)
    job = local_script_job(tmp_path, "print('never runs')\n", "headless")
    home = tmp_path / "home"
    env = dict(os.environ, DLRUN_HOME=str(home), DLRUN_RAY_BIN=str(ray), RAY_USAGE_STATS_ENABLED="0")
    env.pop("DLRUN_RAY_ADDRESS", None)

    r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "submit", str(job)], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=300)

    assert r.returncode == EXIT_PROVISIONING, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    [error] = [line for line in r.stderr.splitlines() if line.startswith("dlrun: error:")]
    assert str(home / "local_head.log") in error and "The current node timed out during startup" in error
    tries = runs(ray)
    assert len(tries) == 3  # dlrun's tries, each on other free ports
    for _, temp_dir, stray, group in tries:
        assert not Path(temp_dir).exists()
        assert gone(stray) and gone(group)
