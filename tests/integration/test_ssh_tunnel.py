"""infra/vm/ssh.py's tunnel, against a stand-in `ssh` client on PATH that really listens on the forwarded
port: the command line (key, per-cluster known_hosts, the user's ssh config), failures, re-opening."""
from __future__ import annotations

import os

import pytest

from infra.base import Cluster, Node, ProvisionError

REGION = "us-east-1"

FAKE_SSH = """#!{python}
import json, os, socket, sys, time
args = sys.argv[1:]
open(os.environ["FAKE_SSH_LOG"], "w").write(json.dumps(args))
if os.environ.get("FAKE_SSH_FAIL"):
    sys.stderr.write("Warning: something\\nuser@host: Permission denied (publickey).\\n")
    sys.exit(255)
local = args[args.index("-L") + 1].split(":")
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\nsrv.bind((local[0], int(local[1]))); srv.listen()
time.sleep(60)
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    import sys
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH.format(python=sys.executable))
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_LOG", str(tmp_path / "ssh-args.json"))
    return tmp_path / "ssh-args.json"


def cloud_cluster() -> Cluster:
    return Cluster(cluster_id="t1", provider="aws", region=REGION, zone="us-east-1a",
                   instance_type="g4dn.xlarge", spot=False, price_per_hour=0.526,
                   nodes=[Node("i-1", private_ip="10.0.0.5", public_ip="54.1.2.3", is_head=True)],
                   ssh_user="ubuntu", ssh_key_path="/keys/t1.pem")


def test_tunnel_runs_ssh_with_a_local_only_forward(fake_ssh):
    import json
    import socket
    from infra.vm.ssh import known_hosts_path, open_tunnel
    with open_tunnel(cloud_cluster(), remote_port=8265, timeout_s=20) as tunnel:
        port = tunnel.local_port
        assert tunnel.local_address == f"http://127.0.0.1:{port}"
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        args = json.loads(fake_ssh.read_text())
        process = tunnel._proc
    assert process.poll() is not None  # closed with the context
    assert "-N" in args and args[args.index("-L") + 1] == f"127.0.0.1:{port}:127.0.0.1:8265"
    assert "StrictHostKeyChecking=accept-new" in args and "ExitOnForwardFailure=yes" in args
    assert f"UserKnownHostsFile={known_hosts_path('t1')}" in args  # one known_hosts per cluster
    assert args[args.index("-i") + 1] == "/keys/t1.pem" and args[-1] == "ubuntu@54.1.2.3"


def test_tunnel_honours_the_users_ssh_config(fake_ssh, monkeypatch, tmp_path):
    import json
    from infra.vm.ssh import open_tunnel
    monkeypatch.setenv("DLRUN_SSH_CONFIG", str(tmp_path / "ssh_config"))
    with open_tunnel(cloud_cluster(), timeout_s=20):
        args = json.loads(fake_ssh.read_text())
    assert args[args.index("-F") + 1] == str(tmp_path / "ssh_config")


def test_a_dropped_tunnel_is_reopened_on_the_same_port(fake_ssh):
    import socket
    import time
    from infra.vm.ssh import Tunnel
    with Tunnel(cloud_cluster(), 8265, check_s=0.1).open(timeout_s=20) as tunnel:
        first = tunnel._proc
        first.kill()  # the connection drops (laptop sleep, Wi-Fi)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (tunnel._proc is first or not tunnel._accepts()):
            time.sleep(0.1)
        assert tunnel.reopened >= 1 and tunnel._proc is not first
        socket.create_connection(("127.0.0.1", tunnel.local_port), timeout=2).close()


def test_tunnel_failure_says_why(fake_ssh, monkeypatch):
    from infra.vm.ssh import open_tunnel
    monkeypatch.setenv("FAKE_SSH_FAIL", "1")
    with pytest.raises(ProvisionError, match="Permission denied"):
        open_tunnel(cloud_cluster(), timeout_s=20)
