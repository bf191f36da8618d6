"""Where `dlrun dashboard --metrics` finds the configs Ray generated: the session directory of the head,
under Ray's temp root computed as Ray computes it. Files only (the processes: tests/e2e/test_monitoring_e2e.py)."""
from __future__ import annotations

import os

from infra.local.head import LocalHead
from orchestrator.monitoring.metrics_stack import ray_session_dir, ray_temp_dir


def sessions(root, *names):
    """Ray's session directories under root, older first, and session_latest -> the last one."""
    dirs = []
    for i, name in enumerate(names):
        d = root / name
        d.mkdir(parents=True)
        os.utime(d, (1_000_000 + i, 1_000_000 + i))
        dirs.append(d)
    (root / "session_latest").symlink_to(dirs[-1])
    return dirs


def head(**kw) -> LocalHead:
    return LocalHead(dashboard_url="http://127.0.0.1:8265", gcs_address="127.0.0.1:6379", **kw)


def test_dlruns_head_is_the_newest_session_named_after_its_process_group(tmp_path):
    _, mine, _ = sessions(tmp_path, "session_2026-11-26_09-00-00_000001_4242",  # older, same group
                          "session_2026-11-26_10-00-00_000001_4242",
                          "session_2026-11-26_11-00-00_000001_77")  # newest: another head's
    assert ray_session_dir(head(pgid=4242, started_by_dlrun=True, temp_dir=str(tmp_path))) == mine


def test_a_head_dlrun_did_not_start_is_the_latest_session_under_rays_temp_root(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    _, latest = sessions(tmp_path / "ray", "session_a_1", "session_b_2")
    assert ray_session_dir(head(pgid=None, started_by_dlrun=False)) == latest


def test_no_session_at_all_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert ray_session_dir(head(pgid=4242, started_by_dlrun=True)) is None


def test_rays_temp_root_is_ray_tmpdir_else_tmpdir_else_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "r"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    assert ray_temp_dir() == tmp_path / "r" / "ray"
    monkeypatch.delenv("RAY_TMPDIR")
    assert ray_temp_dir() == tmp_path / "t" / "ray"  # Linux (this project's platform)
    monkeypatch.delenv("TMPDIR")
    assert str(ray_temp_dir()) == "/tmp/ray"
