"""infra/bootstrap.py: the start-up script, run for real by bash against stub python3/ray commands."""
from __future__ import annotations

import shlex
import subprocess

import pytest

from infra.base import BootstrapConfig
from infra.vm.bootstrap import startup_script

STUB = """#!/bin/bash
echo "$(basename "$0") $*" >> "$STUB_LOG"
if [ "$(basename "$0")" = ray ] && [ -n "${RAY_FAILS_LEFT_FILE:-}" ]; then
  left=$(cat "$RAY_FAILS_LEFT_FILE")
  if [ "$left" -gt 0 ]; then echo $((left - 1)) > "$RAY_FAILS_LEFT_FILE"; exit 1; fi
fi
"""


@pytest.fixture
def node(tmp_path):
    """Run a start-up script with stub `python3` and `ray` on PATH; returns (returncode, log lines)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "ray", "sleep"):
        (bin_dir / name).write_text(STUB)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "calls.log"

    def run(script: str, ray_failures: int = 0):
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(tmp_path),
               "DLRUN_NODE_DIR": str(tmp_path / "node")}
        if ray_failures:
            (tmp_path / "fails").write_text(str(ray_failures))
            env["RAY_FAILS_LEFT_FILE"] = str(tmp_path / "fails")
        proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        calls = log.read_text().splitlines() if log.exists() else []
        return proc.returncode, calls, tmp_path / "node"

    return run


CFG = BootstrapConfig(ray_version="2.60.0", python_packages=["einops==0.8.0"])


def test_head_installs_the_pinned_ray_and_starts_the_head(node):
    rc, calls, node_dir = node(startup_script(CFG, is_head=True, cluster_id="c-1"))
    assert rc == 0
    pip = next(c for c in calls if c.startswith("python3 -m pip install ray"))
    assert shlex.split(pip)[4:] == ["ray[default,train]==2.60.0", "torch", "scikit-learn", "numpy", "einops==0.8.0"]
    (start,) = [c for c in calls if c.startswith("ray ")]
    assert start.startswith("ray start --head --port=6379 --dashboard-host=127.0.0.1 --dashboard-port=8265")
    assert (node_dir / "cluster").read_text() == "c-1\n" and (node_dir / "ready").exists()


def test_worker_keeps_trying_to_join_until_the_head_is_up(node):
    rc, calls, node_dir = node(startup_script(CFG, is_head=False, head_ip="10.0.0.5"), ray_failures=3)
    starts = [c for c in calls if c.startswith("ray ")]
    assert rc == 0 and len(starts) == 4
    assert set(starts) == {"ray start --address=10.0.0.5:6379 --disable-usage-stats"}
    assert (node_dir / "ready").exists()


def test_worker_gives_up_when_the_head_never_answers(node, monkeypatch):
    monkeypatch.setattr("infra.vm.bootstrap.JOIN_ATTEMPTS", 3)
    rc, calls, node_dir = node(startup_script(CFG, is_head=False, head_ip="10.0.0.5"), ray_failures=99)
    assert rc != 0 and len([c for c in calls if c.startswith("ray ")]) == 3
    assert not (node_dir / "ready").exists()


def test_hostile_values_stay_single_arguments_and_run_nothing(node, tmp_path):
    marker = tmp_path / "pwned"
    nasty = f"torch; touch {marker} #'\"$(touch {marker})`touch {marker}`"
    cfg = BootstrapConfig(ray_version="2.60.0", python_packages=[nasty])
    rc, calls, node_dir = node(startup_script(cfg, is_head=True, cluster_id=f"x'; touch {marker}; '"))
    assert rc == 0 and not marker.exists()
    pip = next(c for c in calls if c.startswith("python3 -m pip install ray"))
    assert pip.endswith(nasty)
    assert (node_dir / "cluster").read_text() == f"x'; touch {marker}; '\n"


def test_worker_needs_the_head_address_and_nothing_listens_publicly():
    with pytest.raises(ValueError):
        startup_script(CFG, is_head=False)
    for script in (startup_script(CFG, is_head=True), startup_script(CFG, is_head=False, head_ip="10.0.0.5")):
        assert "0.0.0.0" not in script and "RAY_USAGE_STATS_ENABLED=0" in script
        assert "AWS_SECRET" not in script
