"""A small stateful fake of the Compute Engine REST API, for the real google-cloud-compute client.

Serves the endpoints dlrun uses (instances insert/get/list/delete/getSerialPortOutput, zone
operations get/wait/list, firewalls insert/get/list/delete, global operations get/wait; projects.get,
networks, subnetworks and region operations in gce_network.py) on 127.0.0.1,
validates request bodies the way GCE does, and answers with GCE-shaped Operation and error JSON.
Faults are injected through methods on FakeGce: stockout(zone), quota(metric), forbid(), preempt(instance);
guest_shutdown(instance) is what GCE does when the VM's OS powers itself off (the VM harness calls it).

    with FakeGce() as gce:
        client = compute_v1.InstancesClient(credentials=AnonymousCredentials(),
                                            client_options=ClientOptions(api_endpoint=gce.endpoint),
                                            transport="rest")
"""
from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Callable
from urllib.parse import parse_qs, urlparse

from tests.fakes.gce_errors import NAME_RE, ApiError, bad_request
from tests.fakes.gce_network import NetworkApi
from tests.fakes.http import LocalHttpServer

PREFIX = "/compute/v1/projects/"
LABEL_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")  # accelerator-optimized: GPUs come with the machine


@dataclass
class Quota:
    metric: str  # GPUS_ALL_REGIONS (global) or a regional one such as NVIDIA_T4_GPUS
    region: str | None = None
    on_insert: bool = False  # reported as the insert's HTTP error instead of in the operation


@dataclass
class FakeGce(NetworkApi, LocalHttpServer):
    project: str = "dlrun-test"
    instances: dict = field(default_factory=dict)  # (zone, name) -> instance JSON
    firewalls: dict = field(default_factory=dict)  # name -> firewall JSON
    networks: dict = field(default_factory=dict)  # name -> network JSON (no `default` network: many orgs have none)
    subnetworks: dict = field(default_factory=dict)  # (region, name) -> subnetwork JSON
    common_metadata: dict = field(default_factory=dict)  # the project's common instance metadata
    zone_offerings: dict = field(default_factory=dict)  # zone -> accelerator types offered (absent: all)
    operations: dict = field(default_factory=dict)  # (zone or "global", name) -> operation JSON
    requests: list = field(default_factory=list)  # (method, path, body) of every call, for asserts
    capacity: dict = field(default_factory=dict)  # zone -> how many more instances it can still take
    quotas: list = field(default_factory=list)
    forbidden: bool = False
    # (zone, name) -> the instance's serial console text, for getSerialPortOutput; the VM harness
    # (tests/fakes/vm) sets it to serve its VMs' console logs. None: every console is empty.
    serial_port_output: Callable[[str, str], str] | None = None

    def __post_init__(self):
        self._lock = threading.RLock()
        self._ids = itertools.count(1000)
        self._addresses = itertools.count(2)
        self._pending_errors: dict = {}  # operation key -> (http status, error code, message)
        self._subnet_next: dict = {}  # subnetwork link -> the next host number it hands out

    # ------------------------------------------------------------ lifecycle
    poll_interval_s = 0.05  # LocalHttpServer (start/stop/endpoint): a quick stop

    def make_handler(self):
        return _handler_for(self)

    # ------------------------------------------------------------ fault injection
    def stockout(self, *zones: str, after: int = 0) -> None:
        """These zones run out of capacity after `after` more instances."""
        self.capacity.update({zone: after for zone in zones})

    def quota(self, metric: str, region: str | None = None, *, on_insert: bool = False) -> None:
        self.quotas.append(Quota(metric, region, on_insert))

    def forbid(self, on: bool = True) -> None:
        self.forbidden = on

    def preempt(self, name: str, *, delete: bool = False) -> None:
        """GCE reclaims a spot VM: TERMINATED (or deleted, termination action DELETE) + an operation."""
        with self._lock:
            zone, inst = next((k[0], v) for k, v in self.instances.items() if k[1] == name)
            if delete:
                del self.instances[(zone, name)]
            else:
                inst["status"] = "TERMINATED"
            self._operation(zone, "compute.instances.preempted", inst["selfLink"], done=True,
                            user="system")

    def guest_shutdown(self, name: str, instance_id: str | None = None) -> str | None:
        """The guest OS powered itself off (`shutdown -h now`): TERMINATED, or deleted when the instance's
        scheduling.instanceTerminationAction is DELETE, + a compute.instances.guestTerminate operation.
        Returns "TERMINATED" or "DELETED"; None if there is no such instance (with that id) running."""
        with self._lock:
            found = [(k[0], v) for k, v in self.instances.items() if k[1] == name
                     and v["status"] == "RUNNING" and instance_id in (None, v["id"])]
            if not found:
                return None
            zone, inst = found[0]
            if (inst.get("scheduling") or {}).get("instanceTerminationAction") == "DELETE":
                del self.instances[(zone, name)]
            else:
                inst["status"] = "TERMINATED"
            self._operation(zone, "compute.instances.guestTerminate", inst["selfLink"], done=True,
                            user="system")
            return "TERMINATED" if (zone, name) in self.instances else "DELETED"

    # ------------------------------------------------------------ helpers for tests
    def running(self) -> list[dict]:
        return [i for i in self.instances.values() if i["status"] not in ("TERMINATED", "STOPPED")]

    # ------------------------------------------------------------ request handling
    def handle(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        with self._lock:
            self.requests.append((method, path, body))
            try:
                if self.forbidden:
                    raise ApiError(403, f"Required 'compute.instances.list' permission for "
                                        f"'projects/{self.project}'", "forbidden")
                return 200, self._route(method, path, query, body)
            except ApiError as e:
                return e.code, e.body()

    def _route(self, method: str, path: str, query: dict, body: dict | None) -> dict:
        if not path.startswith(PREFIX):
            raise ApiError(404, f"unknown path {path}", "notFound")
        project, _, rest = path[len(PREFIX):].partition("/")
        if project != self.project:
            raise ApiError(404, f"The resource 'projects/{project}' was not found", "notFound")
        parts = rest.split("/")
        answer = self._route_network(method, parts, body)
        if answer is not None:
            return answer
        match parts, method:
            case ["zones", zone, "instances"], "POST":
                return self._insert_instance(zone, body or {})
            case ["zones", zone, "instances"], "GET":
                items = [i for (z, _), i in sorted(self.instances.items()) if z == zone]
                return _listing("compute#instanceList", _filtered(items, query))
            case ["zones", zone, "instances", name], "GET":
                return self._get(self.instances, (zone, name), f"zones/{zone}/instances/{name}")
            case ["zones", zone, "instances", name, "serialPort"], "GET":
                return self._serial_port(zone, name, query)
            case ["zones", zone, "instances", name], "DELETE":
                inst = self._get(self.instances, (zone, name), f"zones/{zone}/instances/{name}")
                del self.instances[(zone, name)]
                return self._operation(zone, "delete", inst["selfLink"])
            case ["zones", zone, "operations"], "GET":
                items = [o for (z, _), o in self.operations.items() if z == zone]
                return _listing("compute#operationList", _filtered(items, query))
            case ["zones", zone, "operations", name, *_wait], _:
                return self._poll((zone, name), f"zones/{zone}/operations/{name}")
            case ["global", "operations", name, *_wait], _:
                return self._poll(("global", name), f"global/operations/{name}")
            case ["global", "firewalls"], "POST":
                return self._insert_firewall(body or {})
            case ["global", "firewalls"], "GET":
                return _listing("compute#firewallList", _filtered(list(self.firewalls.values()), query))
            case ["global", "firewalls", name], "GET":
                return self._get(self.firewalls, name, f"global/firewalls/{name}")
            case ["global", "firewalls", name], "DELETE":
                fw = self._get(self.firewalls, name, f"global/firewalls/{name}")
                del self.firewalls[name]
                return self._operation("global", "delete", fw["selfLink"])
        raise ApiError(404, f"unknown path {path}", "notFound")

    def _link(self, rest: str) -> str:
        return f"https://www.googleapis.com/compute/v1/projects/{self.project}/{rest}"

    def _get(self, table: dict, key, what: str) -> dict:
        if key not in table:
            raise ApiError(404, f"The resource 'projects/{self.project}/{what}' was not found", "notFound")
        return table[key]

    def _operation(self, zone: str, kind: str, target: str, *, done: bool = False,
                   error: tuple[int, str, str] | None = None, user: str = "dlrun@example.com") -> dict:
        name = f"operation-{next(self._ids)}"
        # zone is a zone, "global", or "region:<region>"
        where = ("global" if zone == "global" else f"regions/{zone[7:]}" if zone.startswith("region:")
                 else f"zones/{zone}")
        op = {"kind": "compute#operation", "id": str(next(self._ids)), "name": name,
              "operationType": kind, "targetLink": target, "user": user, "progress": 0,
              "status": "DONE" if done else "RUNNING", "selfLink": self._link(f"{where}/operations/{name}")}
        if zone.startswith("region:"):
            op["region"] = self._link(f"regions/{zone[7:]}")
        elif zone != "global":
            op["zone"] = self._link(f"zones/{zone}")
        self.operations[(zone, name)] = op
        if error:
            self._pending_errors[(zone, name)] = error
        return dict(op)

    def _poll(self, key, what: str) -> dict:
        """get and wait alike: the fake's operations finish at the first poll."""
        op = self._get(self.operations, key, what)
        if op["status"] != "DONE":
            op.update(status="DONE", progress=100)
            if key in self._pending_errors:
                status, code, message = self._pending_errors.pop(key)
                op["httpErrorStatusCode"] = status
                op["httpErrorMessage"] = {503: "SERVICE UNAVAILABLE", 403: "FORBIDDEN"}.get(status, "ERROR")
                op["error"] = {"errors": [{"code": code, "message": message}]}
            elif op["operationType"] == "insert":
                inst = next((i for i in self.instances.values() if i["selfLink"] == op["targetLink"]), None)
                if inst:
                    inst["status"] = "RUNNING"
        return op

    # ------------------------------------------------------------ instances
    def _insert_instance(self, zone: str, body: dict) -> dict:
        _validate_instance(zone, body)
        self.check_offered(zone, body)
        private_ip = self.attach(zone, body["networkInterfaces"][0])
        name = body["name"]
        if (zone, name) in self.instances:
            raise ApiError(409, f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                                "already exists", "alreadyExists")
        region = zone.rsplit("-", 1)[0]
        link = self._link(f"zones/{zone}/instances/{name}")
        gpus = sum(int(a.get("acceleratorCount", 0)) for a in body.get("guestAccelerators", []))
        machine = body["machineType"].rsplit("/", 1)[-1]
        gpus += 1 if machine.startswith(BUILT_IN_GPU_FAMILIES) else 0
        error = None
        for q in self.quotas:
            if gpus and (q.region in (None, region)):
                scope = "globally" if q.metric == "GPUS_ALL_REGIONS" else f"in region {region}"
                message = f"Quota '{q.metric}' exceeded.  Limit: 0.0 {scope}."
                if q.on_insert:
                    raise ApiError(403, message, "quotaExceeded")
                error = (403, "QUOTA_EXCEEDED", message)
        if not error and self.capacity.get(zone, 1) <= 0:
            error = (503, "ZONE_RESOURCE_POOL_EXHAUSTED",
                     f"The zone 'projects/{self.project}/zones/{zone}' does not have enough resources "
                     "available to fulfill the request.  Try a different zone, or try again later.")
        if not error:
            if zone in self.capacity:
                self.capacity[zone] -= 1
            number = next(self._addresses)  # like GCE, an address is not handed out twice at once
            nic = dict(body["networkInterfaces"][0], networkIP=private_ip or f"10.128.0.{number}")
            if nic.get("accessConfigs"):
                nic["accessConfigs"] = [dict(nic["accessConfigs"][0], natIP=f"203.0.113.{number}")]
            self.instances[(zone, name)] = dict(
                body, kind="compute#instance", id=str(next(self._ids)), status="PROVISIONING",
                zone=self._link(f"zones/{zone}"), selfLink=link, networkInterfaces=[nic],
                machineType=self._link(f"zones/{zone}/machineTypes/{machine}"))
        return self._operation(zone, "insert", link, error=error)

    def _serial_port(self, zone: str, name: str, query: dict) -> dict:
        """getSerialPortOutput: the console from byte `start` on, and where the next read starts."""
        inst = self._get(self.instances, (zone, name), f"zones/{zone}/instances/{name}")
        text = self.serial_port_output(zone, name) if self.serial_port_output else ""
        data = text.encode()
        start = min(int((query.get("start") or ["0"])[0]), len(data))
        return {"kind": "compute#serialPortOutput", "contents": data[start:].decode(errors="replace"),
                "start": str(start), "next": str(len(data)), "selfLink": inst["selfLink"] + "/serialPort"}

    # ------------------------------------------------------------ firewalls
    def _insert_firewall(self, body: dict) -> dict:
        for key in ("name", "network"):
            if not body.get(key):
                raise bad_request(f"Invalid value for field 'resource.{key}': ''. Must be specified.")
        if not NAME_RE.match(body["name"]):
            raise bad_request(f"Invalid value for field 'resource.name': '{body['name']}'.")
        if not body.get("allowed") and not body.get("denied"):
            raise bad_request("Invalid value for field 'resource.allowed': must specify allowed or denied.")
        if not body.get("sourceRanges") and not body.get("sourceTags"):
            raise bad_request("Firewall rule needs sourceRanges or sourceTags.")
        self.network_named(body["network"])
        if body["name"] in self.firewalls:
            raise ApiError(409, f"The resource 'projects/{self.project}/global/firewalls/{body['name']}' "
                                "already exists", "alreadyExists")
        link = self._link(f"global/firewalls/{body['name']}")
        self.firewalls[body["name"]] = dict(body, kind="compute#firewall", id=str(next(self._ids)),
                                            direction=body.get("direction", "INGRESS"), selfLink=link)
        return self._operation("global", "insert", link)


def _validate_instance(zone: str, body: dict) -> None:
    for key in ("name", "machineType", "disks", "networkInterfaces"):
        if not body.get(key):
            raise bad_request(f"Invalid value for field 'resource.{key}': ''. Must be specified.")
    if not NAME_RE.match(body["name"]):
        raise bad_request(f"Invalid value for field 'resource.name': '{body['name']}'. Must be a match "
                          "of regex '[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?'")
    machine_zone = re.search(r"zones/([^/]+)/machineTypes/", body["machineType"])
    if not machine_zone or machine_zone.group(1) != zone:
        raise bad_request(f"Invalid value for field 'resource.machineType': '{body['machineType']}'. "
                          f"Machine type must be in zone {zone}.")
    if not any(d.get("boot") for d in body["disks"]):
        raise bad_request("Invalid value for field 'resource.disks': no boot disk.")
    for key, value in (body.get("labels") or {}).items():
        if not LABEL_KEY_RE.match(key) or not LABEL_RE.match(value):
            raise bad_request(f"Invalid value for field 'resource.labels': '{key}={value}'. Label keys "
                              "and values may contain only lowercase letters, digits, '_' and '-'.")
    machine = body["machineType"].rsplit("/", 1)[-1]
    accelerators = body.get("guestAccelerators") or []
    for acc in accelerators:
        acc_zone = re.search(r"zones/([^/]+)/acceleratorTypes/", acc.get("acceleratorType", ""))
        if not acc_zone or acc_zone.group(1) != zone:
            raise bad_request(f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': "
                              f"'{acc.get('acceleratorType')}'. Accelerator type must be in zone {zone}.")
    if accelerators and machine.startswith(BUILT_IN_GPU_FAMILIES):
        raise bad_request(f"Machine type {machine} has GPUs attached; guestAccelerators must not be set.")
    if accelerators and not machine.startswith("n1-"):
        raise bad_request(f"Accelerators can only be attached to N1 machine types, not {machine}.")
    scheduling = body.get("scheduling") or {}
    has_gpu = bool(accelerators) or machine.startswith(BUILT_IN_GPU_FAMILIES)
    if has_gpu and scheduling.get("onHostMaintenance") != "TERMINATE":
        raise bad_request("Instances with guest accelerators do not support live migration: "
                          "scheduling.onHostMaintenance must be TERMINATE.")
    max_run = int((scheduling.get("maxRunDuration") or {}).get("seconds", 0))
    if max_run and not (30 <= max_run <= 120 * 86400 and scheduling.get("instanceTerminationAction")):
        raise bad_request("scheduling.maxRunDuration must be 30 s to 120 days, with instanceTerminationAction.")
    if scheduling.get("provisioningModel") == "SPOT" and scheduling.get("automaticRestart", True):
        raise bad_request("Invalid value for field 'resource.scheduling.automaticRestart': 'true'. "
                          "Spot instances cannot be automatically restarted.")


def _filtered(items: list[dict], query: dict) -> list[dict]:
    """The subset of GCE's filter grammar dlrun sends: `field = "v"`, `labels.k = "v"`, `labels.k:*`,
    joined by AND, each term optionally in parentheses."""
    text = (query.get("filter") or [""])[0].strip()
    if not text:
        return items
    terms = [t.strip().strip("()").strip() for t in re.split(r"\)?\s+AND\s+\(?", text)]
    out = items
    for term in terms:
        m = re.fullmatch(r'([\w.-]+)\s*(=|eq|:)\s*"?([^"]*)"?', term)
        if not m:
            raise bad_request(f"Invalid list filter expression '{text}'.")
        key, op, value = m.groups()

        def lookup(item, key=key):
            if key.startswith("labels."):
                return (item.get("labels") or {}).get(key[len("labels."):])
            return item.get(key)
        if op == ":" and value == "*":
            out = [i for i in out if lookup(i) is not None]
        else:
            out = [i for i in out if lookup(i) == value]
    return out


def _listing(kind: str, items: list[dict]) -> dict:
    return {"kind": kind, "items": items} if items else {"kind": kind}


def _handler_for(fake: FakeGce):
    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            status, payload = fake.handle(self.command, url.path, parse_qs(url.query), body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, *args):  # keep test output quiet
            pass

    return Handler
