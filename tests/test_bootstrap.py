"""infra/vm/bootstrap.py: the start-up script, run for real by bash — as cloud-init runs it (no HOME,
`env -i` with only a PATH, cwd /) — against a stub `python3` that records its calls.

The stub stands in for the image's interpreter: `python3 -m venv DIR` makes DIR/bin/python (the same
stub), `python -m pip ...` succeeds unless told to fail, `python -m ray.scripts.scripts start ...`
fails as often as a test says (a worker joining before the head is up).
"""
from __future__ import annotations

import shlex
import subprocess

import pytest

from infra.base import BootstrapConfig
from infra.vm.bootstrap import WATCHDOG, startup_script

STUB = r"""#!/bin/bash
echo "python $* [auth=${RAY_AUTH_MODE:-none} token=$(cat "${RAY_AUTH_TOKEN_PATH:-/dev/null}" 2>/dev/null)]" >> "$STUB_LOG"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$4/bin" && cp "$0" "$4/bin/python"; exit 0
fi
if [ "$1 $2" = "-m pip" ] && [ -e "$STUB_DIR/pip_fails" ]; then echo "ERROR: No matching distribution"; exit 1; fi
if [ "$1 $2 $3" = "-m ray.scripts.scripts start" ] && [ -e "$STUB_DIR/fails" ]; then
  left=$(cat "$STUB_DIR/fails")
  if [ "$left" -gt 0 ]; then echo $((left - 1)) > "$STUB_DIR/fails"; exit 1; fi
fi
"""


@pytest.fixture
def node(tmp_path):
    """Run a start-up script under `env -i`; returns (returncode, calls, node dir, output)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "sleep"):
        (bin_dir / name).write_text(STUB.replace("$STUB_LOG", str(tmp_path / "calls.log"))
                                    .replace("$STUB_DIR", str(tmp_path)))
        (bin_dir / name).chmod(0o755)
    # the watchdog would power the machine off: here `setsid` only records how it was started
    (bin_dir / "setsid").write_text(f'#!/bin/bash\necho "setsid $*" >> {tmp_path / "calls.log"}\n')
    (bin_dir / "setsid").chmod(0o755)
    # the image's user database: the login user's home is a test directory
    home = tmp_path / "home"
    home.mkdir()
    (bin_dir / "getent").write_text(f'#!/bin/bash\n[ "$2" = ubuntu ] && echo "ubuntu:x:1000:1000::{home}:/bin/bash"\n')
    (bin_dir / "getent").chmod(0o755)

    def run(script: str, ray_failures: int = 0, pip_fails: bool = False, token: str | None = "s3cret-token"):
        if token is not None:
            (home / ".dlrun-ray-token").write_text(token)  # what dlrun hands over through SSH
        if ray_failures:
            (tmp_path / "fails").write_text(str(ray_failures))
        if pip_fails:
            (tmp_path / "pip_fails").touch()
        script = script.replace('"${DLRUN_NODE_DIR:-/var/lib/dlrun}"', shlex.quote(str(tmp_path / "node")))
        path = tmp_path / "boot.sh"
        path.write_text(script)
        proc = subprocess.run(["env", "-i", f"PATH={bin_dir}:/usr/bin:/bin", "bash", str(path)], cwd="/",
                              capture_output=True, text=True, timeout=30)
        log = tmp_path / "calls.log"
        calls = log.read_text().splitlines() if log.exists() else []
        return proc.returncode, calls, tmp_path / "node", proc.stdout + proc.stderr

    return run


CFG = BootstrapConfig(ray_version="2.60.0", python_packages=["einops==0.8.0"])


def test_head_installs_the_pinned_ray_into_a_venv_and_starts_the_head(node):
    rc, calls, node_dir, out = node(startup_script(CFG, is_head=True, cluster_id="c-1"))
    assert rc == 0, out
    assert calls[1].startswith(f"python -m venv --system-site-packages {node_dir}/venv ")
    pip = next(c for c in calls if c.startswith("python -m pip install")).split(" [auth=")[0]
    assert shlex.split(pip)[4:] == ["ray[default,train]==2.60.0", "torch", "scikit-learn", "numpy", "einops==0.8.0"]
    (start,) = [c for c in calls if "ray.scripts.scripts" in c]
    assert "start --head" in start and "--port=6379 --dashboard-host=127.0.0.1 --dashboard-port=8265" in start
    assert start.endswith("[auth=token token=s3cret-token]")  # Ray starts with token auth, the token handed over
    assert not (node_dir.parent / "home" / ".dlrun-ray-token").exists()  # moved into the node directory
    assert (node_dir / "cluster").read_text() == "c-1\n" and (node_dir / "ready").exists()
    assert "dlrun boot done" in (node_dir / "boot.log").read_text()
    assert "PIP_BREAK_SYSTEM_PACKAGES" not in startup_script(CFG, is_head=True)


def test_the_watchdog_starts_first_with_the_limits(node):
    cfg = BootstrapConfig(ray_version="2.60.0", heartbeat_timeout_s=120, max_run_s=7200)
    rc, calls, node_dir, out = node(startup_script(cfg, is_head=True, login_user="ubuntu"))
    assert rc == 0, out
    (watchdog,) = [c for c in calls if c.startswith("setsid")]
    assert watchdog == f"setsid nohup bash {node_dir}/watchdog.sh 120 7200 ubuntu {node_dir}/self-end.sh"
    assert calls.index(watchdog) < next(i for i, c in enumerate(calls) if "pip install" in c)
    assert "shutdown -h now" in (node_dir / "watchdog.sh").read_text()


def test_without_the_token_ray_never_starts(node, monkeypatch):
    monkeypatch.setattr("infra.vm.bootstrap.TOKEN_WAIT_S", 2)
    rc, calls, node_dir, _ = node(startup_script(CFG, is_head=True), token=None)
    assert rc != 0 and not [c for c in calls if "ray.scripts.scripts" in c]
    assert "no Ray token arrived over SSH" in (node_dir / "failed").read_text()


def test_the_token_is_never_in_the_script():
    script = startup_script(CFG, is_head=True)
    assert "RAY_AUTH_TOKEN=" not in script and "RAY_AUTH_TOKEN_PATH=\"$NODE_DIR/ray_token\"" in script


def test_worker_keeps_trying_to_join_until_the_head_is_up(node):
    rc, calls, node_dir, out = node(startup_script(CFG, is_head=False, head_ip="10.0.0.5"), ray_failures=3)
    starts = [c for c in calls if "ray.scripts.scripts start" in c]
    assert rc == 0 and len(starts) == 4, out
    assert all("--address=10.0.0.5:6379" in s for s in starts)
    assert (node_dir / "ready").exists()


def test_worker_gives_up_when_the_head_never_answers(node, monkeypatch):
    monkeypatch.setattr("infra.vm.bootstrap.JOIN_ATTEMPTS", 3)
    rc, calls, node_dir, _ = node(startup_script(CFG, is_head=False, head_ip="10.0.0.5"), ray_failures=99)
    assert rc != 0 and len([c for c in calls if "ray.scripts.scripts start" in c]) == 3
    assert not (node_dir / "ready").exists()
    assert "could not join the head at 10.0.0.5" in (node_dir / "failed").read_text()


def test_a_failed_install_is_reported_in_the_failed_marker_and_the_log(node):
    rc, _, node_dir, _ = node(startup_script(CFG, is_head=True), pip_fails=True)
    assert rc != 0 and not (node_dir / "ready").exists()
    assert "pip could not install" in (node_dir / "failed").read_text()
    assert "No matching distribution" in (node_dir / "boot.log").read_text()


def test_hostile_values_stay_single_arguments_and_run_nothing(node, tmp_path):
    marker = tmp_path / "pwned"
    nasty = f"torch; touch {marker} #'\"$(touch {marker})`touch {marker}`"
    cfg = BootstrapConfig(ray_version="2.60.0", python_packages=[nasty])
    rc, calls, node_dir, out = node(startup_script(cfg, is_head=True, cluster_id=f"x'; touch {marker}; '"))
    assert rc == 0 and not marker.exists(), out
    pip = next(c for c in calls if c.startswith("python -m pip install"))
    assert pip.split(" [auth=")[0].endswith(nasty)
    assert (node_dir / "cluster").read_text() == f"x'; touch {marker}; '\n"


def test_worker_needs_the_head_address_and_nothing_listens_publicly():
    with pytest.raises(ValueError):
        startup_script(CFG, is_head=False)
    for script in (startup_script(CFG, is_head=True), startup_script(CFG, is_head=False, head_ip="10.0.0.5")):
        assert "0.0.0.0" not in script and "RAY_USAGE_STATS_ENABLED=0" in script
        assert "AWS_SECRET" not in script


def test_the_watchdog_checks_at_a_tenth_of_its_idle_limit_and_powers_off(tmp_path):
    """watchdog.sh itself, with a `shutdown` that records instead of powering off: a 3 s limit is
    checked every second (a 900 s one every 20 s), so the VM goes within a second or two of it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "shutdown").write_text(f"#!/bin/bash\necho \"shutdown $*\" > {tmp_path}/off\n")
    (bin_dir / "shutdown").chmod(0o755)
    (tmp_path / "watchdog.sh").write_text(WATCHDOG)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".dlrun-heartbeat").touch()
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    # getent answers the login user's home: point it at ours through a stand-in getent
    (bin_dir / "getent").write_text(f"#!/bin/bash\necho \"{user}:x:0:0::{home}:/bin/bash\"\n")
    (bin_dir / "getent").chmod(0o755)
    out = subprocess.run(["bash", str(tmp_path / "watchdog.sh"), "3", "0", user], capture_output=True, text=True,
                         timeout=30, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert (tmp_path / "off").read_text().strip() == "shutdown -h now dlrun watchdog"
    silent = int(out.stdout.split("no heartbeat from dlrun for ")[1].split("s")[0])
    assert 3 <= silent <= 4, out.stdout
