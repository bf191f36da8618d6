"""The VM harness itself: instances of the fake clouds become VMs that boot their script, answer SSH with
the key the cloud was given, show their console through the cloud's API, power off as their cloud does, and
vanish without a trace; a stock VM installs Ray only from the lab's index. The images themselves and reboots:
test_vm_images.py."""
from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from google.cloud import compute_v1
from moto.server import ThreadedMotoServer

from tests.support.vm.clouds import wait_until
from tests.support.vm.fixtures import ssh_argv, ssh_keypair, vm_lab  # noqa: F401  (fixture)
from tests.support.vm.lab import VmLab
from tests.support.vm.machine import VmSpec
from tests.support.gce_client import ZONE, client, fake_gce, gce_delete, gce_insert  # noqa: F401  (fixture)
from tests.support.vm.checks import assert_vm_gone

REGION = "us-east-1"
MOTO_AMI = "ami-12c6146b"  # one of moto's default AMIs (describe_images would load them all: ~2 s)
HTTP_SCRIPT = """#!/bin/bash
set -e
mkdir -p /var/lib/dlrun
echo "marker from $(hostname)" > /var/lib/dlrun/marker
nohup python3 -m http.server 8000 --bind 127.0.0.1 --directory /var/lib/dlrun >/dev/null 2>&1 &
echo "boot script done"
"""


@pytest.fixture
def ec2_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"), timeout=10)
    yield url
    server.stop()


def ssh(lab, key, target: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(ssh_argv(lab, key, target) + [command], capture_output=True, text=True,
                          timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def forward(lab, key, target: str, remote_port: int):
    """An `ssh -N -L` tunnel from a local port to the VM's 127.0.0.1:remote_port; yields the local port."""
    port = free_port()
    proc = subprocess.Popen(ssh_argv(lab, key, target, "-N", "-o", "ExitOnForwardFailure=yes",
                                     "-L", f"127.0.0.1:{port}:127.0.0.1:{remote_port}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield port
    finally:
        proc.kill()
        proc.wait()


def http_get(url: str, timeout_s: float = 30) -> bytes:
    def attempt():
        try:
            return urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            return None
    return wait_until(attempt, timeout_s, f"no answer from {url}", interval_s=0.1)


def test_gce_instance_becomes_a_vm_with_ssh_console_and_no_trace_after_delete(vm_lab, fake_gce, tmp_path):
    key, public = ssh_keypair(tmp_path)
    vm_lab.watch_gce(fake_gce)
    gce_insert(fake_gce, "node-1", public, HTTP_SCRIPT)
    vm = vm_lab.wait_for_vm("node-1")
    assert vm.spec.public_ip.startswith("203.0.113.") and vm.spec.private_ip.startswith("10.128.0.")
    config = vm_lab.ssh_config.read_text()
    assert vm.address.startswith("169.254.") and vm.address in vm.routed
    assert f"Host {vm.spec.public_ip}\n  HostName {vm.address}\n" in config
    assert f"Host {vm.spec.private_ip}\n  HostName {vm.address}\n" in config
    vm.wait_for_console("boot script done")
    vm.wait_for_ssh()
    target = f"dlrun@{vm.spec.public_ip}"

    out = ssh(vm_lab, key, target, "cat /var/lib/dlrun/marker; id -un; echo $HOME; ip route; "
                                   "python3 -c 'import orchestrator' 2>&1 | tail -1")
    assert out.returncode == 0, out.stderr
    marker, user, home, *rest = out.stdout.splitlines()
    assert (marker, user, home) == ("marker from node-1", "dlrun", "/home/dlrun")
    assert not any(line.startswith("default") for line in rest)  # no way off this machine
    assert "No module named 'orchestrator'" in rest[-1]  # the project is not on the VM
    assert ssh(vm_lab, key, f"root@{vm.spec.public_ip}", "true").returncode == 255  # no root login

    with forward(vm_lab, key, target, 8000) as port:
        assert http_get(f"http://127.0.0.1:{port}/marker") == b"marker from node-1\n"

    serial = client(fake_gce).get_serial_port_output(project=fake_gce.project, zone=ZONE,
                                                         instance="node-1")
    assert "boot script done" in serial.contents and int(serial.next_) == len(serial.contents.encode())
    later = client(fake_gce).get_serial_port_output(request=compute_v1.GetSerialPortOutputInstanceRequest(
        project=fake_gce.project, zone=ZONE, instance="node-1", start=int(serial.next_)))
    assert later.contents == "" and later.start == serial.next_

    gce_delete(fake_gce, "node-1")
    vm_lab.wait_gone("node-1")
    assert_vm_gone(vm_lab, vm)
    assert subprocess.run(["ip", "netns", "pids", vm.netns], capture_output=True).returncode != 0


def test_ec2_instance_becomes_a_vm_with_ssh_console_and_no_trace_after_terminate(vm_lab, ec2_endpoint,
                                                                                  tmp_path):
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=ec2_endpoint,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    key = tmp_path / "dlrun-key"
    key.write_text(ec2.create_key_pair(KeyName="dlrun-key", KeyType="ed25519")["KeyMaterial"])
    key.chmod(0o600)
    vm_lab.watch_ec2(ec2_endpoint, REGION)
    (inst,) = ec2.run_instances(ImageId=MOTO_AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro",
                                KeyName="dlrun-key", UserData=HTTP_SCRIPT)["Instances"]
    vm = vm_lab.wait_for_vm(inst["InstanceId"])
    assert vm.spec.public_ip and vm.spec.private_ip == inst["PrivateIpAddress"]
    vm.wait_for_console("boot script done")
    vm.wait_for_ssh()

    # moto's public IPs look real: they are routed to the VM, so a direct connection never leaves
    route = subprocess.run(["ip", "route", "get", vm.spec.public_ip], capture_output=True, text=True).stdout
    assert f"dev {vm_lab.net.bridge}" in route
    with socket.create_connection((vm.spec.public_ip, 22), timeout=10) as conn:
        assert conn.recv(7) == b"SSH-2.0"
    out = ssh(vm_lab, key, f"ubuntu@{vm.spec.public_ip}", "cat /var/lib/dlrun/marker; id -un")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == "ubuntu"
    console = ec2.get_console_output(InstanceId=inst["InstanceId"])["Output"]
    assert "boot script done" in console

    ec2.terminate_instances(InstanceIds=[inst["InstanceId"]])
    vm_lab.wait_gone(inst["InstanceId"])
    assert_vm_gone(vm_lab, vm)
    assert "boot script done" in ec2.get_console_output(InstanceId=inst["InstanceId"])["Output"]


def test_vms_reach_each_other_by_private_ip_and_nothing_else_is_shared(vm_lab, fake_gce, tmp_path):
    _, public = ssh_keypair(tmp_path)
    vm_lab.watch_gce(fake_gce)
    gce_insert(fake_gce, "node-a", public)
    gce_insert(fake_gce, "node-b", public)
    a, b = vm_lab.wait_for_vm("node-a"), vm_lab.wait_for_vm("node-b")
    a.wait_for_ssh()
    b.wait_for_ssh()
    banner = "timeout 5 bash -c 'exec 3<>/dev/tcp/{}/22; head -c 7 <&3'"
    assert a.run(banner.format(b.spec.private_ip)).stdout == "SSH-2.0"
    assert b.run(banner.format(a.spec.private_ip)).stdout == "SSH-2.0"
    assert "unreachable" in a.run("ip route get 192.0.2.2").stderr.lower()
    a.run("mkdir -p /var/lib/dlrun; echo only-a > /tmp/file; echo only-a > /var/lib/dlrun/file", check=True)
    assert b.run("cat /tmp/file /var/lib/dlrun/file").returncode != 0
    assert a.run("hostname").stdout.strip() == "node-a" and a.run("id -un", user="dlrun").stdout == "dlrun\n"
    assert [p for p in a.run("ps -eo comm=").stdout.split() if p == "sshd"] == ["sshd"]  # its own only
    fake_gce.preempt("node-a")
    vm_lab.wait_gone("node-a")
    assert_vm_gone(vm_lab, a)
    assert "node-b" in vm_lab.vms


def test_two_labs_whose_vms_share_a_private_ip_each_reach_their_own_mirrors(vm_lab):
    """Two labs at once (two pytest workers) may boot VMs with the same private IP (the team cluster's
    10.77.0.2 in both): the host routes that address to the first lab's VM only, so each VM must talk
    to its lab's servers from its own lab address, or the second's connections get no answer."""
    with VmLab() as other:
        ours = vm_lab.boot(VmSpec("same-ip-1", "10.66.0.2", None, "dlrun", []))
        theirs = other.boot(VmSpec("same-ip-2", "10.66.0.2", None, "dlrun", []))
        for lab, vm in ((vm_lab, ours), (other, theirs)):
            got = vm.run(f"curl -fsS -m 10 -o /dev/null -w '%{{http_code}}' {lab.apt.url}/dists/bookworm/InRelease")
            assert (got.returncode, got.stdout) == (0, "200"), (vm.spec.instance_id, got.stderr)
    assert other.leftovers() == []


def test_sshd_delay_makes_ssh_wait(vm_lab, fake_gce, tmp_path):
    key, public = ssh_keypair(tmp_path)
    vm_lab.sshd_delay_s = 1.5
    vm_lab.watch_gce(fake_gce)
    gce_insert(fake_gce, "slow-ssh", public)
    vm = vm_lab.wait_for_vm("slow-ssh")
    with pytest.raises(ConnectionRefusedError):  # the VM runs, its sshd does not yet
        socket.create_connection((vm.address, 22), timeout=5).close()
    wait_until(lambda: ssh(vm_lab, key, f"dlrun@{vm.spec.public_ip}", "true").returncode == 0, 30,
               "sshd never came up", interval_s=0.2)


POWEROFF_SCRIPT = """#!/bin/bash
echo "power commands: $(command -v shutdown poweroff halt systemctl reboot | tr '\\n' ' ')"
sleep 1
shutdown -h now
echo "shutdown returned $?"
sleep 60
echo "still running after shutdown"
"""
POWER_COMMANDS = "power commands: " + " ".join(f"/usr/local/sbin/{c}" for c in
                                               ("shutdown", "poweroff", "halt", "systemctl", "reboot"))


def host_identity() -> tuple[str, str, bool]:
    """What a power-off reaching the host would change: its boot id, its PID 1's start, /run/vm-power."""
    return (Path("/proc/sys/kernel/random/boot_id").read_text(), Path("/proc/1/stat").read_text().split()[21],
            Path("/run/vm-power").exists())


def assert_powered_off(lab, vm, console: str) -> None:
    assert POWER_COMMANDS in console  # the VM's own commands come first on its PATH
    assert "The system will power off now!" in console  # what `shutdown -h now` printed
    assert "[vm] poweroff requested by `shutdown -h now`" in console and "reboot: Power down" in console
    assert "still running after shutdown" not in console  # the power-off stopped the boot script
    assert_vm_gone(lab, vm)


def test_guest_shutdown_terminates_or_stops_the_ec2_instance(vm_lab, ec2_endpoint):
    host = host_identity()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=ec2_endpoint,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    vm_lab.watch_ec2(ec2_endpoint, REGION)
    (terminating,) = ec2.run_instances(ImageId=MOTO_AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro",
                                       UserData=POWEROFF_SCRIPT,
                                       InstanceInitiatedShutdownBehavior="terminate")["Instances"]
    # gzip'd, as dlrun sends a boot script over EC2's 16 KB: cloud-init runs it all the same
    (stopping,) = ec2.run_instances(ImageId=MOTO_AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro",
                                    UserData=gzip.compress(POWEROFF_SCRIPT.encode()))["Instances"]  # default: stop
    ids = [terminating["InstanceId"], stopping["InstanceId"]]
    vms = [vm_lab.wait_for_vm(i) for i in ids]
    for vm in vms:
        vm_lab.wait_gone(vm.instance_id)
    states = {i["InstanceId"]: i["State"]["Name"]
              for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]}
    assert states == {ids[0]: "terminated", ids[1]: "stopped"}
    assert [vm.power_handled for vm in vms] == ["terminated", "stopped"]
    for vm in vms:
        assert_powered_off(vm_lab, vm, ec2.get_console_output(InstanceId=vm.instance_id)["Output"])
    assert host_identity() == host


def test_guest_shutdown_stops_the_gce_instance_even_a_spot_one_whose_termination_action_is_delete(
        vm_lab, fake_gce, tmp_path):
    """GCE applies instanceTerminationAction=DELETE to preemption and the run-time limit only: a guest
    power-off leaves both instances TERMINATED with their disks (see power.py)."""
    host = host_identity()
    _, public = ssh_keypair(tmp_path)
    vm_lab.watch_gce(fake_gce)
    gce_insert(fake_gce, "standard", public, POWEROFF_SCRIPT)
    gce_insert(fake_gce, "spot", public, POWEROFF_SCRIPT,
               {"provisioning_model": "SPOT", "instance_termination_action": "DELETE",
                "automatic_restart": False})
    vms = [vm_lab.wait_for_vm(name) for name in ("standard", "spot")]
    consoles = [vm.wait_for_console("reboot: Power down") for vm in vms]
    for vm in vms:
        vm_lab.wait_gone(vm.instance_id)
    assert [vm.power_handled for vm in vms] == ["TERMINATED", "TERMINATED"]
    assert sorted((n, i["status"]) for (_, n), i in fake_gce.instances.items()) == [
        ("spot", "TERMINATED"), ("standard", "TERMINATED")]
    kinds = [o["operationType"] for o in fake_gce.operations.values()]
    assert kinds.count("compute.instances.guestTerminate") == 2
    for vm, console in zip(vms, consoles):
        assert_powered_off(vm_lab, vm, console)
    assert host_identity() == host


def test_power_commands_stop_every_process_of_their_vm_only(vm_lab):
    """Without a cloud (VMs booted by hand): the power commands' options, and what the init does."""
    host = host_identity()
    vms = {cmd: vm_lab.boot(VmSpec(f"power-{i}", f"10.99.0.{i + 2}", None, "dlrun", []))
           for i, cmd in enumerate(("poweroff", "halt -p", "systemctl poweroff", "halt",
                                    "shutdown -h now 'dlrun watchdog'"))}  # (as infra/vm/watchdog.sh)
    vm = vms["poweroff"]
    assert vm.run("command -v shutdown poweroff halt systemctl reboot").stdout.split() == \
        [f"/usr/local/sbin/{c}" for c in ("shutdown", "poweroff", "halt", "systemctl", "reboot")]
    refused = vm.run("poweroff", user="dlrun")
    assert refused.returncode == 1 and "Access denied" in refused.stderr
    assert vm.run("reboot").returncode == 1 and vm.run("shutdown -r now").returncode == 1
    assert "power off now" in vm.run("shutdown -k now", check=True).stdout  # -k: the message only
    assert "Shutdown scheduled for" in vm.run("shutdown -h +5", check=True).stdout
    def timer_running() -> bool:  # the timer is started in the background: it may not have exec'd sleep yet
        return "sleep" in vm.run("ps -eo comm=").stdout.split()
    wait_until(timer_running, 10, "no timer after `shutdown -h +5`")
    vm.run("shutdown -c", check=True)
    wait_until(lambda: not timer_running(), 10, "the timer still runs after `shutdown -c`")
    assert "not been booted with systemd" in vm.run("systemctl status ssh").stderr  # the host's, harmless
    assert vm.power_request() is None and len(vm.processes()) > 1

    for cmd, vm in vms.items():
        out = vm.run(cmd)  # the command's shell may die in the power-off: its return code is moot
        assert f"The system will {'halt' if cmd == 'halt' else 'power off'} now!" in out.stdout
    for cmd, vm in vms.items():
        request = wait_until(vm.power_request, 30, f"no power-off after {cmd}")
        assert (request["action"], request["command"]) == ("halt" if cmd == "halt" else "poweroff",
                                                           cmd.replace("'", ""))
        in_vm = [pid for pid, _ in vm.processes() if os.readlink(f"/proc/{pid}/ns/pid") == vm.pidns]
        assert in_vm == [vm.init_pid] and vm.alive  # the init idles, alone
        assert ("reboot: System halted" if cmd == "halt" else "reboot: Power down") in vm.console_log()
        assert f"[vm] {request['action']} requested by `{request['command']}`" in vm.console_log()
    assert host_identity() == host


RAY_SCRIPT = """#!/bin/bash
# what dlrun's boot does on a stock image, in short: uv's binary from the index's uv wheel (checked
# against the index's sha256), a venv made by uv, torch from the torch mirror, Ray from the PyPI mirror
set -ex
mkdir -p /var/lib/dlrun && cd /var/lib/dlrun
link=$(curl -fsS {pypi}/uv/ | grep -o 'href="[^"]*"' | head -n1 | sed 's/^href="//; s/"$//')
curl -fsS -o uv.whl "{base}${{link%%#*}}"
echo "${{link##*sha256=}}  uv.whl" | sha256sum -c
python3 -c "import sys, zipfile; z = zipfile.ZipFile('uv.whl'); open('uv', 'wb').write(z.read(next(n for n in z.namelist() if n.endswith('/scripts/uv'))))"
chmod 755 uv
./uv venv --python /usr/bin/python3 venv
./uv pip install --python venv/bin/python --index-url {torch}/cpu torch==2.13.0
./uv pip install --python venv/bin/python --index-url {pypi} 'ray[default,train]==2.60.0' scikit-learn numpy
export RAY_USAGE_STATS_ENABLED=0
venv/bin/python -m ray.scripts.scripts start --head --disable-usage-stats --num-cpus 1
echo "ray head is up"
"""


@pytest.mark.ray  # slow: a venv, ~500 MB of wheels from the lab's index and a real Ray head inside a VM
def test_stock_image_installs_ray_from_the_lab_index_and_runs_a_ray_head_behind_ssh(vm_lab, fake_gce, tmp_path):
    key, public = ssh_keypair(tmp_path)
    vm_lab.watch_gce(fake_gce)
    m = vm_lab.mirrors
    gce_insert(fake_gce, "ray-head", public,
               RAY_SCRIPT.format(pypi=m["pypi"], torch=m["torch"], base=m["pypi"].rsplit("/simple", 1)[0]))
    vm = vm_lab.wait_for_vm("ray-head")
    assert vm.image == "stock"
    vm.wait_for_console("ray head is up", timeout_s=300)
    requested = [r.split()[1] for r in vm_lab.index.requests]
    assert any(r.startswith("/files/ray-2.60.0-") for r in requested)
    assert any(r.startswith("/files/torch-2.13.0") for r in requested)
    vm.wait_for_ssh()
    with forward(vm_lab, key, f"dlrun@{vm.spec.public_ip}", 8265) as port:
        version = json.loads(http_get(f"http://127.0.0.1:{port}/api/version"))
    assert version["ray_version"] == "2.60.0"
    with pytest.raises(OSError):  # the dashboard listens on the VM's loopback only
        socket.create_connection((vm.address, 8265), timeout=5).close()
    ray_pids = [pid for pid, comm in vm.processes() if comm in ("raylet", "gcs_server")]
    assert len(ray_pids) == 2
    gce_delete(fake_gce, "ray-head")
    vm_lab.wait_gone("ray-head")
    assert_vm_gone(vm_lab, vm)
    assert not any(Path(f"/proc/{pid}").exists() for pid in ray_pids)
