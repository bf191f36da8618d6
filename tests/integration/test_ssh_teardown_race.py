"""The teardown race behind a CI failure: the cluster's known_hosts file was there again after teardown,
because an SSH call still in flight (the heartbeat thread, a tunnel re-opening) ran after it was removed
and `ssh -o StrictHostKeyChecking=accept-new` wrote the host key again.

Deterministic: a stand-in `ssh` (first on PATH) does what OpenSSH does with accept-new at first contact,
write the host's key into the UserKnownHostsFile it was given, but only when the test lets it (a gate
file), after it reported that it started. So the test holds an ssh "in flight" exactly across teardown,
then lets it go. Teardown here is AwsProvider.terminate on moto (the real code path) and forget_host_keys
(what the GCP provider calls)."""
from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from infra.base import Cluster, Node, ProvisionError
from infra.vm import ready, ssh

FAKE_SSH = r'''#!PYTHON
"""Stand-in for OpenSSH's client: logs each start, waits at the gate, then writes the host key
(accept-new) and, for `-N -L`, serves the forwarded port until killed."""
import os, socket, sys, time
from pathlib import Path

args = sys.argv[1:]
state = Path(os.environ["FAKE_SSH_DIR"])
with open(state / "starts", "a") as f:
    f.write(" ".join(args) + "\n")
known = next(a.split("=", 1)[1] for a in args if a.startswith("UserKnownHostsFile="))
gate = state / "gate"
while not gate.exists():
    time.sleep(0.01)
with open(known, "a") as f:
    f.write("203.0.113.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeHostKeyForTheTest\n")
if "-L" in args:
    port = int(args[args.index("-L") + 1].split(":")[1])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen()
    while True:
        conn, _ = srv.accept()
        conn.close()
'''


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    bin_dir, state = tmp_path / "bin", tmp_path / "ssh-state"
    bin_dir.mkdir()
    state.mkdir()
    exe = bin_dir / "ssh"
    exe.write_text(FAKE_SSH.replace("#!PYTHON", f"#!{sys.executable}"))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SSH_DIR", str(state))
    monkeypatch.delenv(ssh.SSH_CONFIG_ENV, raising=False)

    class Fake:
        def starts(self) -> int:
            f = state / "starts"
            return len(f.read_text().splitlines()) if f.exists() else 0

        def wait_started(self, n: int, timeout: float = 20) -> None:
            deadline = time.monotonic() + timeout
            while self.starts() < n:
                assert time.monotonic() < deadline, f"the fake ssh did not start {n} time(s)"
                time.sleep(0.01)

        def open_gate(self) -> None:
            (state / "gate").touch()
    return Fake()


def two_nodes(cluster_id: str) -> Cluster:
    return Cluster(cluster_id=cluster_id, provider="aws", region="us-east-1", zone="us-east-1a",
                   instance_type="c7i.large", spot=False, price_per_hour=0.1, ssh_user="ubuntu",
                   nodes=[Node("i-head", public_ip="203.0.113.10", is_head=True),
                          Node("i-worker", public_ip="203.0.113.11")])


def test_a_heartbeat_in_flight_at_teardown_cannot_write_known_hosts_again(fake_ssh):
    cluster = two_nodes("race-hb")
    errors: list[BaseException] = []

    def run():
        try:
            ready.heartbeat(cluster)  # the real heartbeat: one ssh per node
        except BaseException as e:  # the orchestrator's Heartbeat swallows this; the test records it
            errors.append(e)
    beat = threading.Thread(target=run)
    beat.start()
    fake_ssh.wait_started(1)          # the beat to the head is in flight (before its host-key write)
    ssh.forget_host_keys(cluster.cluster_id)   # teardown's step
    fake_ssh.open_gate()              # whatever is still running may now write
    beat.join(timeout=30)
    assert not beat.is_alive()
    time.sleep(0.3)                   # a straggler would have written by now
    assert not ssh.known_hosts_path(cluster.cluster_id).exists()
    assert fake_ssh.starts() == 1     # the beat to the worker was refused, not started
    assert errors and "being torn down" in str(errors[0])
    with pytest.raises(ProvisionError, match="being torn down"):
        ssh.run(cluster, "true")
    assert fake_ssh.starts() == 1


def test_a_tunnel_that_dropped_just_before_teardown_is_not_reopened(fake_ssh):
    cluster = two_nodes("race-tunnel")
    fake_ssh.open_gate()
    tunnel = ssh.Tunnel(cluster, 8265, check_s=0.05).open(timeout_s=20)
    assert ssh.known_hosts_path(cluster.cluster_id).exists()  # first contact wrote the host key
    tunnel._proc.kill()               # the connection drops: the watcher re-opens it within check_s ...
    tunnel._proc.wait()
    ssh.forget_host_keys(cluster.cluster_id)   # ... unless teardown came first
    starts = fake_ssh.starts()
    time.sleep(1.0)                   # 20 watcher periods
    assert fake_ssh.starts() == starts
    assert not ssh.known_hosts_path(cluster.cluster_id).exists()
    assert tunnel._closed.is_set()
    with socket.socket() as s:        # nothing listens on the tunnel's port any more
        assert s.connect_ex(("127.0.0.1", tunnel.local_port)) != 0
    with pytest.raises(ProvisionError, match="being torn down"):
        ssh.open_tunnel(cluster)


def test_a_tunnel_reopening_during_teardown_is_stopped_before_known_hosts_goes(fake_ssh):
    """The re-open already started (its ssh is past the check, before its host-key write) when teardown
    begins: teardown kills it first, so it never writes."""
    cluster = two_nodes("race-reopen")
    fake_ssh.open_gate()
    tunnel = ssh.Tunnel(cluster, 8265, check_s=0.05).open(timeout_s=20)
    (Path(os.environ["FAKE_SSH_DIR"]) / "gate").unlink()   # the next ssh waits before writing
    tunnel._proc.kill()
    fake_ssh.wait_started(2)          # the watcher re-opened it: in flight
    ssh.forget_host_keys(cluster.cluster_id)
    fake_ssh.open_gate()
    time.sleep(0.5)
    assert not ssh.known_hosts_path(cluster.cluster_id).exists()
    assert fake_ssh.starts() == 2


def test_a_new_launch_of_the_same_cluster_id_may_use_ssh_again(fake_ssh):
    cluster = two_nodes("again")
    ssh.end_ssh(cluster.cluster_id)
    with pytest.raises(ProvisionError):
        ssh.run(cluster, "true")
    ssh.allow_ssh(cluster.cluster_id)
    fake_ssh.open_gate()
    assert ssh.run(cluster, "true")[0] == 0


def test_aws_terminate_stops_the_clusters_ssh_users_before_removing_its_files(fake_ssh, monkeypatch):
    """The real teardown (AwsProvider.terminate on moto) with a heartbeat in flight."""
    from moto import mock_aws

    for k, v in dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                     AWS_EC2_METADATA_DISABLED="true").items():
        monkeypatch.setenv(k, v)
    import boto3

    from tests.support.aws_images import seed_image_parameters
    from tests.support.aws_moto import make_provider, make_request

    with mock_aws():
        seed_image_parameters()
        provider = make_provider(boto3.Session(region_name="us-east-1"))
        cluster = provider.launch(make_request("real-race", nodes=2))
        for node in cluster.nodes:
            node.public_ip = node.public_ip or "203.0.113.10"
        beat = threading.Thread(target=_beat, args=(provider, cluster))  # what attempt.Heartbeat runs
        beat.start()
        fake_ssh.wait_started(1)
        provider.terminate(cluster)
        fake_ssh.open_gate()
        beat.join(timeout=30)
        time.sleep(0.3)
        assert not ssh.known_hosts_path("real-race").exists()
        assert fake_ssh.starts() == 1


def _beat(provider, cluster):
    try:
        provider.heartbeat(cluster)
    except ProvisionError:  # refused once teardown began (attempt.Heartbeat ignores a failed beat)
        pass
