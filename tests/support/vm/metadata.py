"""What a cloud VM finds at 169.254.169.254, and the S3 endpoint it can reach: served inside a lab VM's
network namespace by threads of the test process.

Why threads here and not a process in the VM: the answers come from the fake cloud (the instance's
role credentials are minted by moto's STS for the instance profile EC2 says it has), and the S3
forwarder must reach moto's server on this machine's loopback, which no VM can route to. A socket
keeps the network namespace it was made in, so each listener is made by a short-lived thread that
entered the VM's namespace (setns), then served from ordinary threads here.

- IMDSv2 (tests/support/metadata_server.py's handler): PUT /latest/api/token; with the token:
  meta-data/iam/security-credentials/[ROLE] (the instance profile's role, assumed through STS) and
  meta-data/spot/instance-action (404 until notice()).
- S3: 127.0.0.1:PORT in the VM forwards to 127.0.0.1:PORT here (moto's server), so the endpoint URL
  dlrun hands the node is the one it uses itself.
- GCE (GceVmMetadata): tests/support/gce_metadata.py's server for the VM's own instance (its name, zone,
  project, preemption, its service account's token), and forwarders for the fake Compute Engine's and
  the fake Cloud Storage's ports, so the endpoints dlrun hands the node (DLRUN_GCP_API_ENDPOINT,
  DLRUN_GCS_ENDPOINT) are the ones it uses itself, as a Private Service Connect endpoint would be.
  metadata.google.internal is not resolvable in a lab VM: code on the node must use 169.254.169.254
  (google.auth does; so does dlrun's self-delete script).
"""
from __future__ import annotations

import ctypes
import http.server
import socket
import threading
import time
from typing import Callable

from ..metadata_server import MetadataState, metadata_handler
from .net import ip

METADATA_IP = "169.254.169.254"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def in_netns(netns: str, make: Callable[[], object]):
    """make() run by a thread that entered the named network namespace (sockets it makes stay there)."""
    box: dict = {}

    def run():
        try:
            with open(f"/run/netns/{netns}") as f:
                if _libc.setns(f.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
            box["value"] = make()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=run, name=f"setns-{netns}")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class _VmEndpoints:
    """What both clouds' VMs get: a metadata server on METADATA_IP:80 inside the VM's network namespace,
    and forwarders from 127.0.0.1:PORT in the VM to 127.0.0.1:PORT here (the fake cloud's endpoints)."""

    def __init__(self, netns: str):
        self.netns = netns
        self._servers: list = []
        self._stop = threading.Event()

    def _serve(self, handler, name: str, forward_ports) -> None:
        ip("-n", self.netns, "addr", "add", f"{METADATA_IP}/32", "dev", "lo")
        httpd = in_netns(self.netns, lambda: http.server.ThreadingHTTPServer((METADATA_IP, 80), handler))
        self._servers.append(httpd)
        threading.Thread(target=httpd.serve_forever, daemon=True, name=f"{name}-{self.netns}").start()
        for port in forward_ports:
            listener = in_netns(self.netns, lambda port=port: socket.create_server(("127.0.0.1", port)))
            self._servers.append(listener)
            threading.Thread(target=_forward_loop, args=(listener, port, self._stop), daemon=True,
                             name=f"fwd-{port}-{self.netns}").start()

    def stop(self) -> None:
        self._stop.set()
        for s in self._servers:
            if isinstance(s, http.server.HTTPServer):
                s.shutdown()
                s.server_close()
            else:
                s.close()


class VmMetadata(MetadataState, _VmEndpoints):
    def __init__(self, netns: str, *, role: Callable[[], tuple[str, dict] | None] = lambda: None,
                 s3_port: int | None = None):
        MetadataState.__init__(self, role)
        _VmEndpoints.__init__(self, netns)
        self.s3_port = s3_port

    def start(self) -> "VmMetadata":
        # minted now: the instance profile is there from launch, and IMDS answers within botocore's 1 s
        credentials = self.role()
        self.role = lambda: credentials
        self._serve(metadata_handler(self), "imds", [self.s3_port] if self.s3_port else [])
        return self


class GceVmMetadata(_VmEndpoints):
    """A GCE VM's 169.254.169.254 (the fake metadata server for its instance) and its port forwarders."""

    def __init__(self, netns: str, metadata, forward_ports: tuple[int, ...] = ()):
        super().__init__(netns)
        self.metadata, self.forward_ports = metadata, tuple(p for p in forward_ports if p)

    def start(self) -> "GceVmMetadata":
        from ..gce_metadata import handler_for

        self._serve(handler_for(self.metadata), "gce-md", self.forward_ports)
        return self


def _forward_loop(listener: socket.socket, port: int, stop: threading.Event) -> None:
    """Each connection to 127.0.0.1:port in the VM is piped to 127.0.0.1:port of this machine."""
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=10)
        except OSError:
            conn.close()
            continue
        upstream.settimeout(None)
        for a, b in ((conn, upstream), (upstream, conn)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def moto_role_credentials(endpoint_url: str, region: str, profile_arn: str) -> tuple[str, dict] | None:
    """(role name, IMDS credential document) for an instance profile, minted by moto's STS."""
    import boto3

    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region)
    iam = session.client("iam", endpoint_url=endpoint_url)
    roles = iam.get_instance_profile(InstanceProfileName=profile_arn.rsplit("/", 1)[1])["InstanceProfile"]["Roles"]
    if not roles:
        return None
    role = roles[0]
    c = session.client("sts", endpoint_url=endpoint_url).assume_role(
        RoleArn=role["Arn"], RoleSessionName="i-node")["Credentials"]
    return role["RoleName"], {
        "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": c["AccessKeyId"],
        "SecretAccessKey": c["SecretAccessKey"], "Token": c["SessionToken"],
        "LastUpdated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "Expiration": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 6 * 3600))}
