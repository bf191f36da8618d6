"""The lab's VM images and reboots: the stock image is Debian as the clouds' stock images are (python3 without
ensurepip, nothing for ML, only the lab's index reachable), the deep-learning image has a driver that finds no GPU,
and a restarted VM keeps its disk and runs what its cloud runs at every boot. The VMs' life through the clouds'
APIs (SSH, console, power, delete) is in test_vm_harness.py."""
from __future__ import annotations

from pathlib import Path

from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import vm_lab  # noqa: F401  (fixture)
from tests.support.vm.machine import VmSpec


def test_stock_image_is_debian_without_venv_or_ml_packages_and_reaches_only_the_lab_index(vm_lab):
    """What Canonical's stock images give a boot script: python3 without ensurepip (so no `python3 -m venv`),
    no pip, no ray/torch/numpy, an sshd of their own; nothing of this machine is visible; the lab's package
    index is reachable, the internet (deb.debian.org, pypi.org) is not."""
    vm = vm_lab.boot(VmSpec("stock-1", "10.99.1.2", None, "ubuntu", []))
    assert vm.image == "stock"
    out = vm.run("cat /etc/debian_version; python3 -c 'import sys; print(sys.version_info[:2])'; "
                 "python3 -m venv /tmp/venv; echo venv=$?; python3 -m pip --version; echo pip=$?; "
                 "for m in ensurepip ray torch numpy sklearn; do python3 -c \"import $m\" 2>/dev/null; echo $m=$?; done; "
                 "command -v sshd nvidia-smi uv; ls /work /root/.pyenv /opt/wheels 2>&1 | grep -c 'No such'")
    lines = out.stdout.splitlines()
    assert lines[0].startswith("12.") and lines[1] == "(3, 11)", lines
    assert "ensurepip is not" in out.stdout and "venv=1" in lines and "pip=1" in lines, out.stdout
    assert [f"{m}=1" for m in ("ensurepip", "ray", "torch", "numpy", "sklearn")] == \
        [line for line in lines if line.split("=")[0] in ("ensurepip", "ray", "torch", "numpy", "sklearn")]
    assert lines[-2:] == ["/usr/sbin/sshd", "3"], lines  # no nvidia-smi, no uv; none of the host's paths
    assert vm.run("findmnt -no SOURCE /").stdout.strip() == "overlay"
    index = vm_lab.mirrors["pypi"]
    page = vm.run(f"curl -fsS {index}/uv/", check=True).stdout
    assert "uv-" in page and "#sha256=" in page and "data-core-metadata=" in page
    assert vm.run(f"curl -fsS {vm_lab.mirrors['torch']}/cu130/torch/", check=True).stdout.count(".whl#sha256=") >= 1
    assert vm.run(f"curl -fsS {index}/torch/").returncode != 0  # torch comes from the torch mirror only
    for url in ("http://deb.debian.org/debian/", "https://pypi.org/simple/", "http://151.101.2.132/"):
        assert vm.run(f"curl -sS -m 5 {url}").returncode in (6, 7), url  # can't resolve / can't connect
    assert "deb.debian.org" in vm.run("cat /etc/apt/sources.list").stdout


def test_deep_learning_image_has_the_driver_and_cuda_but_no_gpu(vm_lab):
    vm = vm_lab.boot(VmSpec("dl-1", "10.99.1.3", None, "ubuntu", [], cloud_image="Deep Learning Base OSS Nvidia"))
    assert vm.image == "deep-learning"
    smi = vm.run("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits")
    assert smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout
    assert vm.run("readlink /usr/local/cuda; python3 -c 'import torch'").stdout.strip() == "cuda-13.0"


RESTART_SCRIPT = """#!/bin/bash
mkdir -p /var/lib/dlrun
echo "$0" >> /var/lib/dlrun/runs
case "$0" in /var/lib/cloud/instance/scripts/*) install -D -m 700 "$0" /var/lib/cloud/scripts/per-boot/again.sh;; esac
"""


def _started_ticks(pid: int) -> int:
    """When the process started, in clock ticks since the host booted (/proc/PID/stat field 22)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_a_restarted_vm_keeps_its_disk_and_runs_what_its_cloud_runs_at_every_boot(vm_lab):
    """A reboot / host event restart (lab.restart): the disk stays, /tmp is emptied, the processes are
    new; cloud-init (EC2) does not run user data again but runs its per-boot scripts, GCE's guest agent
    runs the startup script again."""
    vms = {runner: vm_lab.boot(VmSpec(f"restart-{i}", f"10.99.2.{i + 2}", None, "ubuntu", [],
                                      boot_script=RESTART_SCRIPT.encode(), script_runner=runner))
           for i, runner in enumerate(("cloud-init", "gce-startup-script"))}
    for vm in vms.values():
        vm.wait_for_console("exited with status 0")
        vm.run("touch /tmp/scratch /var/lib/dlrun/kept", check=True)
    # new processes: a later-started init (a PID namespace's inode number is reused once the old one is freed)
    first = {runner: (_started_ticks(vm.init_pid), vm.host_key) for runner, vm in vms.items()}
    for runner, vm in vms.items():
        assert vm_lab.restart(vm.instance_id) is vm and vm.boots == 2
        wait_until(lambda: vm.console_log().count("exited with status 0") == 2, 30, "no second boot")
        vm.wait_for_ssh()
        assert _started_ticks(vm.init_pid) > first[runner][0] and vm.host_key == first[runner][1]
        assert vm.run("ls /tmp; ls /var/lib/dlrun").stdout.split() == ["kept", "runs"]
    ec2_runs = vms["cloud-init"].run("cat /var/lib/dlrun/runs").stdout.split()
    assert ec2_runs == ["/var/lib/cloud/instance/scripts/part-001", "/var/lib/cloud/scripts/per-boot/again.sh"]
    gce_runs = vms["gce-startup-script"].run("cat /var/lib/dlrun/runs").stdout.split()
    assert len(gce_runs) == 2 and all(r.startswith("/tmp/metadata-scripts") and r.endswith("/startup-script")
                                      for r in gce_runs) and gce_runs[0] != gce_runs[1]
    assert vm_lab.leftovers() == []
