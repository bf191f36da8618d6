"""infra/vm/bootstrap.py: the start-up script, run for real by bash — as cloud-init runs it (no HOME,
`env -i` with only a PATH, cwd /) — against stand-ins for the image's `python3` and for uv that record
their calls (tests/support/boot_stubs.py). (tests/integration/test_boot_stock_image.py runs the real install
phase in a real stock Debian root.)
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from infra.base import BootstrapConfig
from infra.vm.bootstrap import JOIN_RETRY_S, REJOIN_ATTEMPTS, UV_VERSION, WATCHDOG, startup_script
from tests.support.boot_stubs import NODE_DIR_ANCHOR, node, uv_calls  # noqa: F401 (fixture)

CFG = BootstrapConfig(ray_version="2.60.0", python_packages=["einops==0.8.0"])


def test_head_installs_the_pinned_ray_into_a_venv_and_starts_the_head(node):
    rc, calls, node_dir, out = node(startup_script(CFG, is_head=True, cluster_id="c-1"))
    assert rc == 0, out
    fetch = next(c for c in calls if c.startswith("python - "))  # get_uv.py, from PyPI for this arch
    assert fetch.split()[2:4] == ["https://pypi.org/simple", f"{node_dir}/bin"]
    assert uv_calls(calls, "venv") == [["uv", "venv", "--system-site-packages", "--python",
                                        f"{node_dir.parent}/bin/python3", f"{node_dir}/venv"]]  # the image's python3
    (pip,) = uv_calls(calls)
    assert pip[:7] == ["uv", "pip", "install", "--python", f"{node_dir}/venv/bin/python", "--index-url",
                       "https://pypi.org/simple"]
    assert pip[7:] == ["ray[default,train]==2.60.0", "torch", "scikit-learn", "numpy", "pip", "einops==0.8.0"]
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
    assert calls.index(watchdog) < next(i for i, c in enumerate(calls) if c.startswith("python - "))
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


def test_a_package_the_index_lacks_is_named_in_the_failed_marker_and_the_log(node):
    rc, _, node_dir, _ = node(startup_script(CFG, is_head=True), pip_fails="einops")
    assert rc != 0 and not (node_dir / "ready").exists()
    assert (node_dir / "failed").read_text() == (
        "package einops not found on https://pypi.org/simple (installing ray[default,train]==2.60.0 torch "
        "scikit-learn numpy pip einops==0.8.0)\n")
    assert "einops was not found in the package registry" in (node_dir / "boot.log").read_text()


def test_any_other_install_failure_carries_uv_s_last_words(node):
    rc, _, node_dir, _ = node(startup_script(CFG, is_head=True), pip_fails="")  # "Because  was not found"
    failed = (node_dir / "failed").read_text()
    assert rc != 0 and failed.startswith("could not install ray[default,train]==2.60.0 torch scikit-learn numpy "
                                         "pip einops==0.8.0 from https://pypi.org/simple: ")
    assert "No solution found when resolving dependencies" in failed


def test_no_uv_no_venv_no_install_reports_why(node):
    rc, calls, node_dir, _ = node(startup_script(CFG, is_head=True),
                                  uv_fails="package index unreachable: https://pypi.org/simple/uv/ (timed out)")
    assert rc != 0 and not uv_calls(calls, "") and not [c for c in calls if "ray.scripts" in c]
    assert (node_dir / "failed").read_text() == "package index unreachable: https://pypi.org/simple/uv/ (timed out)\n"


def test_a_mirror_is_where_uv_and_every_package_come_from_and_what_jobs_get(node):
    cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url="http://10.1.2.3:3141/root/pypi/+simple")
    rc, calls, node_dir, out = node(startup_script(cfg, is_head=True))
    assert rc == 0, out
    assert next(c for c in calls if c.startswith("python - ")).split()[2] == "http://10.1.2.3:3141/root/pypi/+simple"
    (pip,) = uv_calls(calls)
    assert pip[5:7] == ["--index-url", "http://10.1.2.3:3141/root/pypi/+simple"]
    (start,) = [c for c in calls if "ray.scripts.scripts start" in c]
    # Ray (and so a job's runtime_env pip or uv) inherits the index; recorded by the uv stand-in's env
    assert "export PIP_INDEX_URL=\"$PIP_INDEX\" UV_DEFAULT_INDEX=\"$PIP_INDEX\"" in startup_script(cfg, is_head=True)


def test_uv_already_on_this_disk_is_not_fetched_again(node):
    script = startup_script(CFG, is_head=True)
    assert node(script)[0] == 0
    rc, calls, node_dir, out = node(script)
    assert rc == 0, out
    assert len([c for c in calls if c.startswith("python - ")]) == 1  # fetched at the first boot only
    assert len(uv_calls(calls, "venv")) == 1  # the venv is kept too


def test_the_script_fits_aws_user_data():
    """EC2 takes at most 16 KB of user-data (before base64): RunInstances' UserData parameter."""
    cfg = BootstrapConfig(ray_version="2.60.0", python_packages=[f"package-{i}==1.0" for i in range(20)],
                          torch_requirement="torch==2.13.0", torch_index_url="https://download.pytorch.org/whl/cu130",
                          gpu_count=8, gpu_memory_gb=80, pip_index_url="https://pypi.example.internal/simple",
                          self_end="curl -s -X DELETE http://metadata/x")
    for script in (startup_script(cfg, is_head=True), startup_script(cfg, is_head=False, head_ip="10.0.0.5")):
        assert len(script.encode()) < 16 * 1024


def test_hostile_values_stay_single_arguments_and_run_nothing(node, tmp_path):
    marker = tmp_path / "pwned"
    nasty = f"torch; touch {marker} #'\"$(touch {marker})`touch {marker}`"
    cfg = BootstrapConfig(ray_version="2.60.0", python_packages=[nasty])
    rc, calls, node_dir, out = node(startup_script(cfg, is_head=True, cluster_id=f"x'; touch {marker}; '"))
    assert rc == 0 and not marker.exists(), out
    (pip,) = uv_calls(calls)
    assert pip[-1] == nasty
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


# --- a second run of the script on the same disk: GCE restarts a VM after a host event -------------------

def test_a_restarted_head_starts_ray_again_with_the_token_of_its_first_boot(node):
    script = startup_script(CFG, is_head=True)
    assert node(script)[0] == 0
    started = time.monotonic()
    rc, calls, node_dir, out = node(script, token=None)  # dlrun hands nothing over a second time
    assert rc == 0, out
    assert time.monotonic() - started < 10  # never the 30-minute token wait (TOKEN_WAIT_S is left as it is)
    starts = [c for c in calls if "ray.scripts.scripts start --head" in c]
    assert len(starts) == 2 and starts[1].endswith("[auth=token token=s3cret-token]")
    assert (node_dir / "ready").exists() and (node_dir / "boots").read_text() == "2\n"
    assert "a restart; rejoining with that token" in (node_dir / "boot.log").read_text()


def test_a_restarted_worker_rejoins_the_head_at_once(node):
    script = startup_script(CFG, is_head=False, head_ip="10.0.0.5")
    assert node(script)[0] == 0
    rc, calls, node_dir, out = node(script, token=None, ray_failures=1)
    assert rc == 0, out
    assert len([c for c in calls if "--address=10.0.0.5:6379" in c]) == 3  # 1 at first boot, 2 now
    assert (node_dir / "ready").exists()


def test_a_restarted_worker_whose_head_is_gone_reports_failed_within_a_minute(node):
    script = startup_script(CFG, is_head=False, head_ip="10.0.0.5")
    assert node(script)[0] == 0
    rc, calls, node_dir, _ = node(script, token=None, ray_failures=99)
    assert rc != 0 and not (node_dir / "ready").exists()
    assert len([c for c in calls if "--address=10.0.0.5:6379" in c]) == 1 + REJOIN_ATTEMPTS
    assert REJOIN_ATTEMPTS * JOIN_RETRY_S <= 60
    assert (node_dir / "failed").read_text() == (
        f"could not join the head at 10.0.0.5 in {REJOIN_ATTEMPTS} tries (a restart: boot 2 of this disk)\n")


def test_a_restart_before_the_token_arrived_still_waits_for_it(node, monkeypatch):
    """The first boot ended (the VM restarted) before dlrun could hand the token over: dlrun, still waiting
    for the node, hands it over now; a disk without a token is a first boot."""
    monkeypatch.setattr("infra.vm.bootstrap.TOKEN_WAIT_S", 2)
    script = startup_script(CFG, is_head=True)
    assert node(script, token=None)[0] != 0
    rc, _, node_dir, out = node(script)
    assert rc == 0 and not (node_dir / "failed").exists(), out


# --- what the image lacks -----------------------------------------------------------------------------

def test_an_image_without_python3_fails_at_once_saying_so(node, tmp_path):
    """PATH holds only the tools a stock image has, python3 left out."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("mkdir", "chmod", "rm", "tee", "cat", "date", "cut", "bash", "seq", "sleep", "touch"):
        found = subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        (tools / tool).symlink_to(found)
    (tmp_path / "bin" / "python3").unlink()
    script = startup_script(CFG, is_head=True).replace("set -uo pipefail", f"set -uo pipefail\nPATH={tools}:{tmp_path}/bin")
    rc, calls, node_dir, out = node(script)
    assert rc != 0 and not uv_calls(calls, ""), out
    assert (node_dir / "failed").read_text() == "this image has no python3 (dlrun needs python3 >= 3.10 on the image)\n"


def test_a_python3_older_than_ray_needs_fails_at_once_saying_so(node, tmp_path):
    (tmp_path / "old_python").touch()
    rc, calls, node_dir, _ = node(startup_script(CFG, is_head=True))
    assert rc != 0 and not [c for c in calls if c.startswith("python - ")]
    failed = (node_dir / "failed").read_text()
    assert failed.startswith("this image's python3 is 3.8 (") and failed.endswith("); dlrun needs python3 >= 3.10\n")


def _get_uv(*args):
    from infra.vm.bootstrap import GET_UV

    return subprocess.run([sys.executable, "-", *map(str, args)], input=GET_UV, capture_output=True, text=True,
                          timeout=60)


def test_get_uv_names_an_architecture_dlrun_has_no_wheel_for(tmp_path):
    from infra.vm.bootstrap import UV_WHEELS

    pins = [f"{arch}={name}={sha}" for arch, (name, sha) in UV_WHEELS.items()]
    proc = _get_uv("http://127.0.0.1:9/simple", tmp_path, "riscv64", UV_VERSION, *pins)
    assert proc.returncode == 1 and not (tmp_path / "uv").exists()
    assert proc.stdout.strip() == f"no uv wheel for this machine's architecture riscv64 (dlrun pins uv {UV_VERSION} for aarch64, x86_64)"


@pytest.fixture
def index_dir(tmp_path):
    """A directory served over HTTP on 127.0.0.1 (http.server): (directory, base URL)."""
    import functools
    import http.server
    import threading

    root = tmp_path / "idx"
    root.mkdir()
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _page(root, links: str):
    (root / "simple" / "uv").mkdir(parents=True, exist_ok=True)
    (root / "simple" / "uv" / "index.html").write_text(links)


def test_get_uv_names_an_index_without_the_pinned_wheel(tmp_path, index_dir):
    """A PEP 503 page for uv that lists other files only (an older uv, say): the index answers, the wheel is
    not there; and an index path that answers 404."""
    root, url = index_dir
    _page(root, '<a href="/f/uv-0.1.0-py3-none-manylinux_2_17_x86_64.whl#sha256=00">uv-0.1.0</a>')
    base = f"{url}/simple"
    proc = _get_uv(base, tmp_path / "bin", "x86_64", UV_VERSION, "x86_64=uv-9-x86_64.whl=" + "a" * 64)
    missing = _get_uv(f"{url}/nothing-here", tmp_path / "bin", "x86_64", UV_VERSION, "x86_64=uv-9-x86_64.whl=" + "a" * 64)
    assert proc.returncode == 1
    assert proc.stdout.strip() == f"no uv wheel for x86_64 on the package index: {base}/uv/ lists no uv-9-x86_64.whl (uv {UV_VERSION})"
    assert missing.returncode == 1 and missing.stdout.startswith("the package index ") and "answered HTTP 404" in missing.stdout


def _wheel_bytes(version: str, binary: bytes) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"uv-{version}.data/scripts/uv", binary)
    return buf.getvalue()


def test_get_uv_checks_the_downloaded_file_against_the_pin_and_extracts_the_binary(tmp_path, index_dir):
    """A page without #sha256= fragments (PEP 503 makes them optional): the pin alone decides. A file that
    is not the pinned one is refused and nothing is written; the pinned one gives DEST/uv, executable."""
    import hashlib

    root, url = index_dir
    good = _wheel_bytes("9", b"#!/bin/sh\necho uv 9\n")
    (root / "f").mkdir()
    (root / "f" / "uv-9-x86_64.whl").write_bytes(b"something else")
    _page(root, '<a href="../../f/uv-9-x86_64.whl">uv-9-x86_64.whl</a>')  # a relative link, as PyPI's
    pin = "x86_64=uv-9-x86_64.whl=" + hashlib.sha256(good).hexdigest()
    bad = _get_uv(f"{url}/simple/", tmp_path / "bin", "x86_64", "9", pin)
    assert bad.returncode == 1 and not (tmp_path / "bin" / "uv").exists()
    assert bad.stdout.strip() == (f"hash mismatch: {url}/f/uv-9-x86_64.whl has sha256 "
                                  f"{hashlib.sha256(b'something else').hexdigest()}; dlrun pins {pin.rsplit('=', 1)[1]}")
    (root / "f" / "uv-9-x86_64.whl").write_bytes(good)
    ok = _get_uv(f"{url}/simple/", tmp_path / "bin", "x86_64", "9", pin)
    assert ok.returncode == 0 and ok.stdout == "", ok.stdout + ok.stderr
    assert subprocess.run([tmp_path / "bin" / "uv"], capture_output=True, text=True).stdout == "uv 9\n"


def test_the_stand_in_node_refuses_a_script_whose_node_directory_line_changed(node, tmp_path):
    """The `node` stand-in moves the script's node directory to the test's own (tests/support/boot_stubs.py): a
    script that no longer names it so fails the test before bash runs it, not a write to the host's /var/lib/dlrun."""
    script = startup_script(CFG, is_head=True)
    assert NODE_DIR_ANCHOR in script  # today's script: the stand-in can move it
    changed = script.replace(NODE_DIR_ANCHOR, '"${DLRUN_NODE_DIR:-/var/lib/dlrun-node}"')
    with pytest.raises(pytest.fail.Exception, match="no longer names its node directory"):
        node(changed)
    assert not (tmp_path / "boot.sh").exists()  # never run
