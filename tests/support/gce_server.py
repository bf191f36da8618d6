"""A small stateful fake of the Compute Engine REST API, for the real google-cloud-compute client.

Serves the endpoints dlrun uses on 127.0.0.1, validates request bodies the way GCE does, and answers with
GCE-shaped Operation and error JSON. FakeGce is this file's server, routing, operations and API-wide
faults, with one mixin per resource, each file's docstring saying what real behaviour it reproduces (with
sources) and what not:
- gce_instances.py: instances insert/get/list/delete/getSerialPortOutput, their disks, stockouts,
  preemption, a guest's power-off, the OS Login org policy;
- gce_firewalls.py: firewalls insert/get/list/delete;
- gce_network.py: projects.get, networks, subnetworks, region operations, what a zone offers;
- gce_iam.py: callers (dlrun's login or a VM's service account), resource IAM policies and their late
  enforcement, service accounts Compute Engine does not know yet;
- gce_quotas.py: which quota an insert draws on and GCE's quota-exceeded answers;
- gce_lists.py: list filters and empty lists; gce_errors.py: GCE's error JSON.
Faults are injected through methods on FakeGce: stockout(zone), quota(metric), forbid(), preempt(instance),
rate_limit(n), require_os_login(); guest_shutdown(instance) is what GCE does when the VM's OS powers
itself off (the VM harness calls it).

Real behaviours this file reproduces:
- zone, region and global operations, polled by get or wait; an insert's error (quota, stockout) is in its
  operation, not in the insert's answer (cloud.google.com/compute/docs/api/handling-api-responses);
- rate limits: 403 rateLimitExceeded ("Rate Limit Exceeded", domain usageLimits) or 429
  (cloud.google.com/compute/api-quotas);
- a caller without compute permissions on the project (`forbid`): 403 forbidden on every call.
Not reproduced: operations that take time (every operation is done at its first poll).

    with FakeGce() as gce:
        client = compute_v1.InstancesClient(credentials=AnonymousCredentials(),
                                            client_options=ClientOptions(api_endpoint=gce.endpoint),
                                            transport="rest")
"""
from __future__ import annotations

import itertools
import json
import random
import threading
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, urlparse

from tests.support.gce_errors import PREFIX, ApiError
from tests.support.gce_firewalls import FirewallApi
from tests.support.gce_iam import IamApi, account_of
from tests.support.gce_instances import InstanceApi
from tests.support.gce_lists import filtered, listing
from tests.support.gce_network import NetworkApi
from tests.support.gce_quotas import QuotaApi
from tests.support.http import LocalHttpServer, QuietHandler


@dataclass
class FakeGce(InstanceApi, FirewallApi, IamApi, QuotaApi, NetworkApi, LocalHttpServer):
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
    disks: dict = field(default_factory=dict)  # (zone, name) -> disk JSON
    iam_policies: dict = field(default_factory=dict)  # ("instances"|"disks", zone, name) -> IAM policy JSON
    iam: object = None  # a FakeGcs: the IAM whose accounts exist (None: accounts are not checked)
    account_lag: int = 0  # inserts naming a new account that are refused before Compute Engine knows it
    os_login_required: bool = False  # the organisation policy constraints/compute.requireOsLogin
    # seconds before a resource's new IAM policy is enforced (IAM changes propagate: usually within a
    # minute, up to 7 min: cloud.google.com/iam/docs/access-change-propagation); 0: at once
    iam_lag_s: float = 0.0
    # (zone, name) -> the instance's serial console text, for getSerialPortOutput; the VM harness
    # (tests/support/vm) sets it to serve its VMs' console logs. None: every console is empty.
    serial_port_output: Callable[[str, str], str] | None = None

    def __post_init__(self):
        self._lock = threading.RLock()
        self._ids = itertools.count(1000)
        # where this fake's addresses start: random, so that two labs on one machine (each with its own
        # FakeGce) do not route the same address; GCE promises no particular address either
        self._address_seed = random.randrange(1 << 16)
        self._addresses = itertools.count(2 + self._address_seed % 150)
        self._pending_errors: dict = {}  # operation key -> (http status, error code, message)
        self._subnet_next: dict = {}  # subnetwork link -> the next host number it hands out
        self._account_refusals: dict = {}  # email -> inserts still to refuse (account_lag)
        self._policy_set_at: dict = {}  # (kind, zone, name) -> when its IAM policy was set (iam_lag_s)
        self._rate_limited: list = []  # (status, reason) answers for the next calls

    # ------------------------------------------------------------ lifecycle
    poll_interval_s = 0.05  # LocalHttpServer (start/stop/endpoint): a quick stop

    def make_handler(self):
        return _handler_for(self)

    # ------------------------------------------------------------ fault injection (more in each part)
    def forbid(self, on: bool = True) -> None:
        self.forbidden = on

    def rate_limit(self, calls: int, *, status: int = 403) -> None:
        """The next `calls` requests exceed the per-minute API rate quota (cloud.google.com/compute/api-quotas):
        403 rateLimitExceeded (domain usageLimits), or 429 RESOURCE_EXHAUSTED as the REST front end answers."""
        with self._lock:
            self._rate_limited += [status] * calls

    # ------------------------------------------------------------ request handling
    def handle(self, method: str, path: str, query: dict, body: dict | None,
               authorization: str = "") -> tuple[int, dict]:
        with self._lock:
            self.requests.append((method, path, body))
            try:
                if self._rate_limited:
                    raise _rate_limit_error(self._rate_limited.pop(0), self.project)
                if self.forbidden:
                    raise ApiError(403, f"Required 'compute.instances.list' permission for "
                                        f"'projects/{self.project}'", "forbidden")
                account = account_of(authorization)
                if account is not None:
                    return 200, self._route_account(account, method, path)
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
        if answer is None:
            answer = self._route_instance(method, parts, query, body)
        if answer is None:
            answer = self._route_firewall(method, parts, query, body)
        if answer is not None:
            return answer
        match parts, method:
            case ["zones", zone, "operations"], "GET":
                items = [o for (z, _), o in self.operations.items() if z == zone]
                return listing("compute#operationList", filtered(items, query))
            case ["zones", zone, "operations", name, *_wait], _:
                return self._poll((zone, name), f"zones/{zone}/operations/{name}")
            case ["global", "operations", name, *_wait], _:
                return self._poll(("global", name), f"global/operations/{name}")
        raise ApiError(404, f"unknown path {path}", "notFound")

    def _link(self, rest: str) -> str:
        return f"https://www.googleapis.com/compute/v1/projects/{self.project}/{rest}"

    def _get(self, table: dict, key, what: str) -> dict:
        if key not in table:
            raise ApiError(404, f"The resource 'projects/{self.project}/{what}' was not found", "notFound")
        return table[key]

    def _operation(self, zone: str, kind: str, target: str, *, done: bool = False,
                   error: tuple | None = None, user: str = "dlrun@example.com") -> dict:
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
                status, code, message, *details = self._pending_errors.pop(key)
                op["httpErrorStatusCode"] = status
                op["httpErrorMessage"] = {503: "SERVICE UNAVAILABLE", 403: "FORBIDDEN"}.get(status, "ERROR")
                op["error"] = {"errors": [{"code": code, "message": message,
                                           **({"errorDetails": details} if details else {})}]}
            elif op["operationType"] == "insert":
                inst = next((i for i in self.instances.values() if i["selfLink"] == op["targetLink"]), None)
                if inst:
                    inst["status"] = "RUNNING"
        return op


def _rate_limit_error(status: int, project: str) -> ApiError:
    if status == 429:
        return ApiError(429, f"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of "
                             f"service 'compute.googleapis.com' for consumer 'project_number:{project}'.",
                        "rateLimitExceeded")
    return ApiError(403, "Rate Limit Exceeded", "rateLimitExceeded", domain="usageLimits")


def _handler_for(fake: FakeGce):
    class Handler(QuietHandler):
        def _serve(self):
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            status, payload = fake.handle(self.command, url.path, parse_qs(url.query), body,
                                          self.headers.get("Authorization", ""))
            self.reply(status, json.dumps(payload).encode(), "application/json; charset=UTF-8")

        do_GET = do_POST = do_DELETE = _serve

    return Handler
