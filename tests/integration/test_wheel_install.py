"""dlrun as a user installs it: a built wheel in a fresh venv, run from a directory outside the checkout.

The fresh venv gets the wheel with `pip install --no-deps --no-index`; its third-party packages
(torch, ray, pydantic, ...) come from the test venv's site-packages through a plain path entry (no
.pth of that directory is processed, so the checkout's editable install stays invisible).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # a copy: building writes build/ and *.egg-info next to the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info",
                                                                 "__pycache__", ".pytest_cache", ".hypothesis"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(work / "dist"), str(source)], check=True, timeout=300,
                   env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    (wheel,) = (work / "dist").glob("dlrun-*.whl")
    env_dir = work / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300, env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    return env_dir, elsewhere


def run(installed, *args, timeout=300):
    env_dir, cwd = installed
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(DLRUN_LOCAL_GPUS="none", RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run([str(env_dir / "bin" / "dlrun"), *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_the_installed_package_is_used_not_the_checkout(installed):
    env_dir, cwd = installed
    out = subprocess.run([str(env_dir / "bin" / "python"), "-c",
                          "import orchestrator, configs; print(orchestrator.__file__); print(configs.CATALOG_DIR)"],
                         capture_output=True, text=True, cwd=cwd, check=True,
                         env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
                         ).stdout.split()
    assert len(out) == 2 and all(str(env_dir) in line for line in out), out


def test_catalog_plan_and_schema_work_outside_the_checkout(installed, dlrun_home):
    r = run(installed, "catalog", "--gpu", "T4")
    assert r.returncode == 0, r.stderr
    assert "g4dn.xlarge" in r.stdout and "Traceback" not in r.stderr

    r = run(installed, "plan", "configs/examples/digits_cnn.yaml", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["chosen"], plan

    r = run(installed, "schema")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["title"]


def test_an_unexpected_error_is_one_line_and_a_crash_file(installed, dlrun_home):
    env_dir, cwd = installed
    # a corrupt state database is not a user mistake dlrun knows: it must not print a bare traceback
    (dlrun_home / "state.db").write_bytes(b"this is not sqlite" * 100)
    r = run(installed, "status")
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dlrun: internal error:") and "Traceback" not in r.stderr
    crash = Path(lines[0].rsplit("full traceback: ", 1)[1].rstrip(")"))
    assert crash.is_file() and "Traceback" in crash.read_text()
