"""A CPU VM that Compute Engine restarts after a host event does not wedge (issue 24, item 8).

dlrun's real start-up script boots a head on the lab's stock Debian image (python3 without venv, packages
from the lab's index through the `mirrors` settings), gets its Ray token over SSH as from dlrun, and is
ready. Then the VM restarts on the same disk (lab.restart: new processes, /tmp emptied, GCE's guest agent
runs the startup script again): the node must be ready again at once with the token of its first boot,
instead of waiting 30 minutes for a token dlrun never hands over twice.
"""
from __future__ import annotations

import secrets
import time

import pytest

from infra.base import BootstrapConfig
from infra.vm.bootstrap import NODE_DIR, TOKEN_FILE, startup_script
from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import ssh_keypair, vm_lab, vm_support_problem  # noqa: F401  (fixture)
from tests.support.vm.checks import assert_vm_gone  # noqa: F401
from tests.support.gce_client import fake_gce, gce_delete, gce_insert  # noqa: F401

pytestmark = [pytest.mark.ray, pytest.mark.skipif(bool(vm_support_problem()), reason=vm_support_problem() or "")]


def ready(vm) -> bool:
    return vm.run(f"test -e {NODE_DIR}/ready").returncode == 0


def test_a_cpu_head_restarted_by_a_host_event_is_ready_again_at_once(vm_lab, fake_gce, tmp_path):
    _, public = ssh_keypair(tmp_path)
    vm_lab.watch_gce(fake_gce)
    m = vm_lab.mirrors
    cfg = BootstrapConfig(ray_version="2.60.0", pip_index_url=m["pypi"], torch_requirement="torch==2.13.0",
                          torch_index_url=m["torch"] + "/cpu")
    gce_insert(fake_gce, "restart-head", public, startup_script(cfg, is_head=True, cluster_id="c-restart",
                                                                 login_user="dlrun"))
    vm = vm_lab.wait_for_vm("restart-head")
    assert vm.image == "stock"
    vm.wait_for_console("waiting for the cluster's Ray token over SSH", timeout_s=300)
    token = secrets.token_hex(24)  # what dlrun hands over through its SSH login
    vm.run(f"printf %s {token} > ~/{TOKEN_FILE} && chmod 600 ~/{TOKEN_FILE}", user="dlrun", check=True)
    wait_until(lambda: ready(vm), 120, "the head never became ready")
    assert vm.run(f"cat {NODE_DIR}/ray_token", check=True).stdout == token

    restarted_at = time.monotonic()
    vm_lab.restart(vm.instance_id)
    wait_until(lambda: vm.console_log().count("dlrun boot done") == 2, 120,
               "the restarted node did not finish its boot (is it waiting for a token again?)")
    took = time.monotonic() - restarted_at
    assert ready(vm)
    log = vm.run(f"cat {NODE_DIR}/boot.log", check=True).stdout
    assert "a restart; rejoining with that token" in log, log[-2000:]
    assert vm.run(f"cat {NODE_DIR}/ray_token", check=True).stdout == token
    assert {comm for _, comm in vm.processes()} >= {"raylet", "gcs_server"}  # Ray runs again
    assert took < 120, f"the restarted head took {took:.0f} s"

    gce_delete(fake_gce, "restart-head")
    vm_lab.wait_gone("restart-head")
    assert_vm_gone(vm_lab, vm)
