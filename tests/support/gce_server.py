"""A small stateful fake of the Compute Engine REST API, for the real google-cloud-compute client.

Serves the endpoints dlrun uses (instances insert/get/list/delete/getSerialPortOutput, zone
operations get/wait/list, firewalls insert/get/list/delete, global operations get/wait; projects.get,
networks, subnetworks and region operations in gce_network.py) on 127.0.0.1,
validates request bodies the way GCE does, and answers with GCE-shaped Operation and error JSON.
Faults are injected through methods on FakeGce: stockout(zone), quota(metric), forbid(), preempt(instance),
rate_limit(n), require_os_login(); guest_shutdown(instance) is what GCE does when the VM's OS powers
itself off (the VM harness calls it).

Real behaviours it reproduces (sources in each method's docstring):
- a guest power-off *stops* the instance (TERMINATED), whatever its instanceTerminationAction: its boot
  disk stays (`disks`) and is still billed (cloud.google.com/compute/docs/instances/stop-start-instance;
  the termination action applies to preemption and maxRunDuration only: docs/instances/limit-vm-runtime);
- an instance's boot disk is a resource of its own (zones/Z/disks/NAME, named after the instance unless
  initializeParams.diskName says otherwise), deleted with the instance only when autoDelete is true;
- callers: a request without credentials is the project's owner (dlrun's own login, AnonymousCredentials);
  `Authorization: Bearer sa:EMAIL` (what tests/support/gce_metadata.py hands a VM) is that service account,
  which may do only what IAM policies on the *resource* grant it (instances/disks setIamPolicy,
  cloud.google.com/compute/docs/access/iam-policies-for-compute-engine-resources), and only with a token
  whose scopes (the scopes of the instance it runs on) include compute or cloud-platform: else 403
  "Request had insufficient authentication scopes." / "Required 'compute.instances.delete' permission";
- quotas draw on what GCE draws on: GPUS_ALL_REGIONS any GPU VM; NVIDIA_T4_GPUS a standard T4 VM of its
  region (and a spot one, as where the region has no preemptible quota); PREEMPTIBLE_NVIDIA_T4_GPUS a spot
  T4 VM; CPUS an N1/E2 VM, N2_CPUS an N2 VM, PREEMPTIBLE_CPUS a spot one; others every VM of the region.
  The message is GCE's ("Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region us-central1.");
- rate limits: 403 rateLimitExceeded ("Rate Limit Exceeded", domain usageLimits) or 429;
- IAM's eventual consistency: with `iam` (a FakeGcs, whose `accounts` IAM serves), an insert naming an
  account IAM does not have, or one made less than `account_lag` inserts ago, answers 400
  "Invalid value for field 'resource.serviceAccounts[0].email': ..." [message shape as GCE's field
  errors; the exact text for a not-yet-propagated account is not documented];
- an organisation policy requiring OS Login refuses instance metadata enable-oslogin=FALSE with 412
  conditionNotMet naming constraints/compute.requireOsLogin [wording not verified against a real project].
- IAM policy changes propagate late: with `iam_lag_s`, a resource's new policy is not enforced for that
  long (cloud.google.com/iam/docs/access-change-propagation).
Not reproduced: operations that take time (every operation is done at its first poll), the graceful
shutdown period of a deletion, etags of IAM policies (a setIamPolicy always wins).

    with FakeGce() as gce:
        client = compute_v1.InstancesClient(credentials=AnonymousCredentials(),
                                            client_options=ClientOptions(api_endpoint=gce.endpoint),
                                            transport="rest")
"""
from __future__ import annotations

import itertools
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import parse_qs, urlparse

from tests.support.gce_errors import NAME_RE, ApiError, bad_request
from tests.support.gce_network import BUILT_IN_ACCELERATORS, NetworkApi
from tests.support.http import LocalHttpServer, QuietHandler

PREFIX = "/compute/v1/projects/"
LABEL_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")  # accelerator-optimized: GPUs come with the machine


@dataclass
class Quota:
    metric: str  # GPUS_ALL_REGIONS (global) or a regional one such as NVIDIA_T4_GPUS
    region: str | None = None
    on_insert: bool = False  # reported as the insert's HTTP error instead of in the operation

    def applies(self, region: str, machine: str, accelerator: str, spot: bool, run_limited: bool = False) -> bool:
        """Whether an instance (region, machine type, GPU type or "", market) draws on this quota. A GPU VM
        deleted after a run time of at most 7 days (`run_limited`) may draw on preemptible quota even on
        demand (cloud.google.com/compute/docs/instances/limit-vm-runtime, "GPU VMs and preemptible
        allocation quotas"): here it does whenever such a quota is set."""
        if self.region not in (None, region):
            return False
        metric = self.metric
        if metric.startswith("PREEMPTIBLE_"):
            if not (spot or (run_limited and accelerator)):
                return False
            metric = metric[len("PREEMPTIBLE_"):]
        series = machine.split("-", 1)[0]
        if metric == "GPUS_ALL_REGIONS":
            return bool(accelerator)
        if m := re.fullmatch(r"NVIDIA_([A-Z0-9_]+)_GPUS", metric):
            return accelerator == GPU_TYPES.get(m.group(1), "")
        if metric == "CPUS":
            return series in ("n1", "e2", "f1", "g1")
        if m := re.fullmatch(r"([A-Z][A-Z0-9]*)_CPUS", metric):
            return series == m.group(1).lower() or metric == "CPUS_ALL_REGIONS"
        return True


# the accelerator type a GPU quota metric counts (cloud.google.com/compute/resource-usage#gpu_quota)
GPU_TYPES = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
             "K80": "nvidia-tesla-k80", "P4": "nvidia-tesla-p4", "A100": "nvidia-tesla-a100",
             "A100_80GB": "nvidia-a100-80gb", "L4": "nvidia-l4", "H100": "nvidia-h100-80gb"}
# roles that hold compute.instances.delete / compute.disks.delete (and get) on the resource they are granted on
DELETE_ROLES = {"roles/owner", "roles/editor", "roles/compute.admin", "roles/compute.instanceAdmin",
                "roles/compute.instanceAdmin.v1"}
COMPUTE_SCOPES = {"https://www.googleapis.com/auth/compute", "https://www.googleapis.com/auth/cloud-platform"}


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

    # ------------------------------------------------------------ fault injection
    def stockout(self, *zones: str, after: int = 0) -> None:
        """These zones run out of capacity after `after` more instances."""
        self.capacity.update({zone: after for zone in zones})

    def quota(self, metric: str, region: str | None = None, *, on_insert: bool = False) -> None:
        self.quotas.append(Quota(metric, region, on_insert))

    def forbid(self, on: bool = True) -> None:
        self.forbidden = on

    def preempt(self, name: str, *, delete: bool = False) -> None:
        """GCE reclaims a spot VM: TERMINATED (or deleted with its auto-delete disks, termination action
        DELETE) + a compute.instances.preempted operation (cloud.google.com/compute/docs/instances/spot)."""
        with self._lock:
            zone, inst = next((k[0], v) for k, v in self.instances.items() if k[1] == name)
            if delete:
                self._delete_instance(zone, name, user="system")
                self.operations.popitem()  # (that delete's own operation: GCE records only the preemption)
            else:
                inst["status"] = "TERMINATED"
            self._operation(zone, "compute.instances.preempted", inst["selfLink"], done=True,
                            user="system")

    def guest_shutdown(self, name: str, instance_id: str | None = None) -> str | None:
        """The guest OS powered itself off (`shutdown -h now`): the instance is stopped (TERMINATED), its disks
        kept and billed, whatever its scheduling.instanceTerminationAction (GCE applies that action to
        preemption and the maxRunDuration limit only), + a compute.instances.guestTerminate operation
        ("Instance terminated by guest OS shutdown"). Returns "TERMINATED"; None if there is no such
        instance (with that id) running."""
        with self._lock:
            found = [(k[0], v) for k, v in self.instances.items() if k[1] == name
                     and v["status"] == "RUNNING" and instance_id in (None, v["id"])]
            if not found:
                return None
            zone, inst = found[0]
            inst["status"] = "TERMINATED"
            self._operation(zone, "compute.instances.guestTerminate", inst["selfLink"], done=True,
                            user="system")
            return "TERMINATED"

    def rate_limit(self, calls: int, *, status: int = 403) -> None:
        """The next `calls` requests exceed the per-minute API rate quota (cloud.google.com/compute/api-quotas):
        403 rateLimitExceeded (domain usageLimits), or 429 RESOURCE_EXHAUSTED as the REST front end answers."""
        with self._lock:
            self._rate_limited += [status] * calls

    def require_os_login(self, on: bool = True) -> None:
        """The organisation enforces constraints/compute.requireOsLogin on this project."""
        self.os_login_required = on

    def os_login_on(self, inst: dict) -> bool:
        """Whether OS Login governs this instance: the org policy, else its own enable-oslogin, else the
        project's (instance metadata overrides project metadata: docs/oslogin/set-up-oslogin)."""
        items = {i["key"].lower(): i.get("value", "") for i in (inst.get("metadata") or {}).get("items", [])}
        value = items.get("enable-oslogin", self.common_metadata.get("enable-oslogin", ""))
        return self.os_login_required or value.strip().upper() == "TRUE"

    # ------------------------------------------------------------ helpers for tests
    def running(self) -> list[dict]:
        return [i for i in self.instances.values() if i["status"] not in ("TERMINATED", "STOPPED")]

    def billed(self) -> list[str]:
        """What still costs money: instances (a TERMINATED one only through its disks) and disks."""
        return [f"instance {k[1]} ({v['status']})" for k, v in self.instances.items()] + \
               [f"disk {k[1]}" for k in self.disks]

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
                account = _account_of(authorization)
                if account is not None:
                    return 200, self._route_account(account, method, path)
                return 200, self._route(method, path, query, body)
            except ApiError as e:
                return e.code, e.body()

    # ------------------------------------------------------------ calls by a service account (a VM's token)
    def _route_account(self, email: str, method: str, path: str) -> dict:
        """What a VM's service account may do: get or delete an instance whose IAM policy (and, to delete it,
        its auto-delete disks' policies) grant the account a role holding those permissions."""
        scopes = {sc for i in self.instances.values() for a in i.get("serviceAccounts") or []
                  if a.get("email") == email for sc in a.get("scopes") or []}
        if not scopes & COMPUTE_SCOPES:
            raise ApiError(403, "Request had insufficient authentication scopes.", "insufficientPermissions")
        parts = path[len(PREFIX):].split("/") if path.startswith(PREFIX) else []
        match parts, method:
            case [project, "zones", zone, "instances", name], ("GET" | "DELETE") if project == self.project:
                verb = "get" if method == "GET" else "delete"
                inst = self._get(self.instances, (zone, name), f"zones/{zone}/instances/{name}")
                self._require(email, "instances", zone, name, f"compute.instances.{verb}")
                if method == "GET":
                    return inst
                for disk in inst.get("disks") or []:
                    if disk.get("autoDelete") and disk.get("source"):
                        self._require(email, "disks", zone, disk["source"].rsplit("/", 1)[-1], "compute.disks.delete")
                return self._delete_instance(zone, name, user=email)
        what = "/".join(parts[1:]) if parts else path
        raise ApiError(403, f"Required 'compute.{_permission_of(method, parts)}' permission for "
                            f"'projects/{self.project}/{what}'", "forbidden")

    def _require(self, email: str, kind: str, zone: str, name: str, permission: str) -> None:
        policy = self.iam_policies.get((kind, zone, name)) or {}
        if time.monotonic() < self._policy_set_at.get((kind, zone, name), 0.0) + self.iam_lag_s:
            policy = {}  # not enforced yet
        member = f"serviceAccount:{email}"
        if not any(b.get("role") in DELETE_ROLES and member in (b.get("members") or [])
                   for b in policy.get("bindings") or []):
            raise ApiError(403, f"Required '{permission}' permission for "
                                f"'projects/{self.project}/zones/{zone}/{kind}/{name}'", "forbidden")

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
                return self._delete_instance(zone, name)
            case ["zones", zone, ("instances" | "disks") as kind, name, "setIamPolicy"], "POST":
                return self._set_iam_policy(kind, zone, name, body or {})
            case ["zones", zone, ("instances" | "disks") as kind, name, "getIamPolicy"], "GET":
                self._get(getattr(self, kind), (zone, name), f"zones/{zone}/{kind}/{name}")
                return self.iam_policies.get((kind, zone, name)) or {"etag": "ACAB"}
            case ["zones", zone, "disks"], "GET":
                items = [d for (z, _), d in sorted(self.disks.items()) if z == zone]
                return _listing("compute#diskList", _filtered(items, query))
            case ["zones", zone, "disks", name], "GET":
                return self._get(self.disks, (zone, name), f"zones/{zone}/disks/{name}")
            case ["zones", zone, "disks", name], "DELETE":
                disk = self._get(self.disks, (zone, name), f"zones/{zone}/disks/{name}")
                if disk.get("users"):
                    raise ApiError(400, f"The disk resource '{disk['selfLink']}' is already being used by "
                                        f"'{disk['users'][0]}'", "resourceInUseByAnotherResource")
                del self.disks[(zone, name)]
                self.iam_policies.pop(("disks", zone, name), None)
                return self._operation(zone, "delete", disk["selfLink"])
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

    def _delete_instance(self, zone: str, name: str, user: str = "dlrun@example.com") -> dict:
        """instances.delete: the instance goes, with the disks it auto-deletes; the others are detached."""
        inst = self._get(self.instances, (zone, name), f"zones/{zone}/instances/{name}")
        del self.instances[(zone, name)]
        self.iam_policies.pop(("instances", zone, name), None)
        for disk in inst.get("disks") or []:
            key = (zone, disk.get("source", "").rsplit("/", 1)[-1])
            if key in self.disks:
                if disk.get("autoDelete"):
                    del self.disks[key]
                    self.iam_policies.pop(("disks",) + key, None)
                else:
                    self.disks[key]["users"] = []
        return self._operation(zone, "delete", inst["selfLink"], user=user)

    def _set_iam_policy(self, kind: str, zone: str, name: str, body: dict) -> dict:
        """zones/Z/{instances,disks}/N/setIamPolicy (ZoneSetPolicyRequest: `policy`, or `bindings`)."""
        self._get(getattr(self, kind), (zone, name), f"zones/{zone}/{kind}/{name}")
        policy = dict(body.get("policy") or {"bindings": body.get("bindings") or []})
        for b in policy.get("bindings") or []:
            if not str(b.get("role", "")).startswith(("roles/", "projects/", "organizations/")):
                raise bad_request(f"Invalid value for field 'resource.policy.bindings.role': '{b.get('role')}'.")
        policy.update(etag=f"etag-{next(self._ids)}", version=policy.get("version", 1))
        self.iam_policies[(kind, zone, name)] = policy
        self._policy_set_at[(kind, zone, name)] = time.monotonic()
        return policy

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

    # ------------------------------------------------------------ instances
    def _insert_instance(self, zone: str, body: dict) -> dict:
        _validate_instance(zone, body)
        self.check_offered(zone, body)
        self._check_accounts(body)
        items = {i["key"].lower(): i.get("value", "") for i in (body.get("metadata") or {}).get("items", [])}
        if self.os_login_required and items.get("enable-oslogin", "").strip().upper() == "FALSE":
            raise ApiError(412, f"Constraint constraints/compute.requireOsLogin violated for project "
                                f"{self.project}. OS Login cannot be disabled in the metadata of "
                                f"'projects/{self.project}/zones/{zone}/instances/{body['name']}'.",
                           "conditionNotMet")
        private_ip = self.attach(zone, body["networkInterfaces"][0])
        name = body["name"]
        if (zone, name) in self.instances:
            raise ApiError(409, f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                                "already exists", "alreadyExists")
        region = zone.rsplit("-", 1)[0]
        link = self._link(f"zones/{zone}/instances/{name}")
        machine = body["machineType"].rsplit("/", 1)[-1]
        accelerator = next((a["acceleratorType"].rsplit("/", 1)[-1] for a in body.get("guestAccelerators", [])), "")
        accelerator = accelerator or next((gpu for family, gpu in BUILT_IN_ACCELERATORS.items()
                                           if machine.startswith(family)), "")
        scheduling = body.get("scheduling") or {}
        spot = scheduling.get("provisioningModel") == "SPOT"
        run_limited = (scheduling.get("instanceTerminationAction") == "DELETE"
                       and 0 < int((scheduling.get("maxRunDuration") or {}).get("seconds", 0)) <= 7 * 86400)
        error = None
        for q in sorted(self.quotas, key=lambda q: not q.on_insert):  # a refused call before an operation
            if q.applies(region, machine, accelerator, spot, run_limited):
                scope = "globally" if q.metric.endswith("ALL_REGIONS") else f"in region {region}"
                message = f"Quota '{q.metric}' exceeded.  Limit: 0.0 {scope}."
                if q.on_insert:
                    raise ApiError(403, message, "quotaExceeded")
                # as GCE's operation error: the message and a quotaInfo detail naming the metric and limit
                quota_info = {"metricName": f"compute.googleapis.com/{q.metric.lower()}",
                              "limitName": f"{q.metric.replace('_', '-')}-per-project"
                                           + ("" if q.metric.endswith("ALL_REGIONS") else "-region"),
                              "limit": 0, **({} if q.metric.endswith("ALL_REGIONS") else
                                             {"dimensions": {"region": region}})}
                error = (403, "QUOTA_EXCEEDED", message, {"quotaInfo": quota_info})
                break
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
            disks = []
            for disk in body["disks"]:
                params = disk.get("initializeParams") or {}
                disk_name = params.get("diskName") or name
                if params:  # a new disk, made with the instance: a resource of its own from now on
                    self.disks[(zone, disk_name)] = {
                        "kind": "compute#disk", "id": str(next(self._ids)), "name": disk_name,
                        "sizeGb": str(params.get("diskSizeGb") or 10), "sourceImage": params.get("sourceImage", ""),
                        "zone": self._link(f"zones/{zone}"), "status": "READY", "users": [link],
                        "selfLink": self._link(f"zones/{zone}/disks/{disk_name}")}
                # as GCE shows an attached disk: its source link and deviceName, not initializeParams
                shown = {k: v for k, v in disk.items() if k != "initializeParams"}
                disks.append(dict(shown, source=self._link(f"zones/{zone}/disks/{disk_name}"),
                                  deviceName=disk.get("deviceName") or disk_name, autoDelete=bool(disk.get("autoDelete"))))
            self.instances[(zone, name)] = dict(
                body, kind="compute#instance", id=str(next(self._ids)), status="PROVISIONING",
                zone=self._link(f"zones/{zone}"), selfLink=link, networkInterfaces=[nic], disks=disks,
                machineType=self._link(f"zones/{zone}/machineTypes/{machine}"))
        return self._operation(zone, "insert", link, error=error)

    def _check_accounts(self, body: dict) -> None:
        """An account the IAM fake does not have, or has had for fewer than account_lag inserts, is unknown
        to Compute Engine yet (IAM is eventually consistent: cloud.google.com/iam/docs/overview#consistency)."""
        if self.iam is None:
            return
        for i, account in enumerate(body.get("serviceAccounts") or []):
            email = account.get("email", "")
            if email not in self.iam.accounts:
                left = 1
            else:
                left = self._account_refusals.setdefault(email, self.account_lag)
                self._account_refusals[email] = max(0, left - 1)
            if left > 0:
                raise bad_request(f"Invalid value for field 'resource.serviceAccounts[{i}].email': '{email}'. "
                                  f"Service account {email} does not exist.")

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
    # "For preemptible instances, the default and only possible behavior is TERMINATE" (Instance resource,
    # scheduling.onHostMaintenance): unset is fine, an explicit MIGRATE is refused
    if scheduling.get("provisioningModel") == "SPOT" and scheduling.get("onHostMaintenance") == "MIGRATE":
        raise bad_request("Invalid value for field 'resource.scheduling.onHostMaintenance': 'MIGRATE'. "
                          "Spot instances do not support live migration.")


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


def _account_of(authorization: str) -> str | None:
    """The service account a bearer token stands for ("sa:EMAIL", tests/support/gce_metadata.py), or None:
    no token is dlrun's own login, the project's owner."""
    token = authorization[len("Bearer "):].strip() if authorization.startswith("Bearer ") else ""
    return token[3:] if token.startswith("sa:") else None


def _permission_of(method: str, parts: list[str]) -> str:
    kind = next((p for p in reversed(parts[1::2]) if p), "projects") if parts else "projects"
    return f"{kind}.{ {'GET': 'get', 'POST': 'create', 'DELETE': 'delete'}.get(method, 'update')}"


def _rate_limit_error(status: int, project: str) -> ApiError:
    if status == 429:
        return ApiError(429, f"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of "
                             f"service 'compute.googleapis.com' for consumer 'project_number:{project}'.",
                        "rateLimitExceeded")
    return ApiError(403, "Rate Limit Exceeded", "rateLimitExceeded", domain="usageLimits")


def _listing(kind: str, items: list[dict]) -> dict:
    return {"kind": kind, "items": items} if items else {"kind": kind}


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
