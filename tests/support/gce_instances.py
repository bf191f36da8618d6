"""The fake Compute Engine's instances and their disks (a FakeGce mixin): instances insert/get/list/delete/
getSerialPortOutput, disks get/list/delete, and what GCE does to an instance on its own (stockouts,
preemption, a guest's power-off).

Real behaviours it reproduces (sources in each method's docstring):
- an insert is validated the way GCE does: required fields, names, labels, machine and accelerator types in
  the instance's zone, GPUs only on N1 (accelerator-optimized families come with theirs), GPU VMs and spot
  VMs do not live-migrate, maxRunDuration needs a termination action (_validate_instance);
- a zone out of capacity fails the insert's operation with ZONE_RESOURCE_POOL_EXHAUSTED (`stockout`);
- a guest power-off *stops* the instance (TERMINATED), whatever its instanceTerminationAction: its boot
  disk stays (`disks`) and is still billed (cloud.google.com/compute/docs/instances/stop-start-instance;
  the termination action applies to preemption and maxRunDuration only: docs/instances/limit-vm-runtime);
- an instance's boot disk is a resource of its own (zones/Z/disks/NAME, named after the instance unless
  initializeParams.diskName says otherwise), deleted with the instance only when autoDelete is true, and a
  disk in use cannot be deleted;
- an organisation policy requiring OS Login refuses instance metadata enable-oslogin=FALSE with 412
  conditionNotMet naming constraints/compute.requireOsLogin [wording not verified against a real project].
Not reproduced: the graceful shutdown period of a deletion, start/stop/reset calls, attaching disks later,
machine types' real CPU and memory.
"""
from __future__ import annotations

import re

from tests.support.gce_errors import NAME_RE, ApiError, bad_request
from tests.support.gce_lists import filtered, listing
from tests.support.gce_network import BUILT_IN_ACCELERATORS
from tests.support.gce_state import GceState

LABEL_RE = re.compile(r"^[a-z0-9_-]{0,63}$")
LABEL_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
BUILT_IN_GPU_FAMILIES = ("a2-", "a3-", "g2-")  # accelerator-optimized: GPUs come with the machine


class InstanceApi(GceState):
    """Mixed into FakeGce (the tables and helpers of GceState), with these of its own."""

    capacity: dict  # zone -> how many more instances it can still take
    os_login_required: bool

    # ------------------------------------------------------------ faults
    def stockout(self, *zones: str, after: int = 0) -> None:
        """These zones run out of capacity after `after` more instances."""
        self.capacity.update({zone: after for zone in zones})

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

    # ------------------------------------------------------------ routes
    def _route_instance(self, method: str, parts: list[str], query: dict, body: dict | None) -> dict | None:
        """The answer for an instance or disk path, or None when the path is not one."""
        match parts, method:
            case ["zones", zone, "instances"], "POST":
                return self._insert_instance(zone, body or {})
            case ["zones", zone, "instances"], "GET":
                items = [i for (z, _), i in sorted(self.instances.items()) if z == zone]
                return listing("compute#instanceList", filtered(items, query))
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
                return listing("compute#diskList", filtered(items, query))
            case ["zones", zone, "disks", name], "GET":
                return self._get(self.disks, (zone, name), f"zones/{zone}/disks/{name}")
            case ["zones", zone, "disks", name], "DELETE":
                return self._delete_disk(zone, name)
        return None

    # ------------------------------------------------------------ instances
    def _insert_instance(self, zone: str, body: dict) -> dict:
        _validate_instance(zone, body)
        self.check_offered(zone, body)
        self._check_accounts(body)
        self._check_os_login_policy(zone, body)
        private_ip = self.attach(zone, body["networkInterfaces"][0])
        name = body["name"]
        if (zone, name) in self.instances:
            raise ApiError(409, f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                                "already exists", "alreadyExists")
        link = self._link(f"zones/{zone}/instances/{name}")
        error = self._launch_error(zone, body)
        if not error:
            self._create_instance(zone, body, link, private_ip)
        return self._operation(zone, "insert", link, error=error)

    def _check_os_login_policy(self, zone: str, body: dict) -> None:
        items = {i["key"].lower(): i.get("value", "") for i in (body.get("metadata") or {}).get("items", [])}
        if self.os_login_required and items.get("enable-oslogin", "").strip().upper() == "FALSE":
            raise ApiError(412, f"Constraint constraints/compute.requireOsLogin violated for project "
                                f"{self.project}. OS Login cannot be disabled in the metadata of "
                                f"'projects/{self.project}/zones/{zone}/instances/{body['name']}'.",
                           "conditionNotMet")

    def _launch_error(self, zone: str, body: dict) -> tuple | None:
        """The insert operation's error: an exhausted quota the instance draws on, else the zone's stockout."""
        region = zone.rsplit("-", 1)[0]
        machine = body["machineType"].rsplit("/", 1)[-1]
        accelerator = next((a["acceleratorType"].rsplit("/", 1)[-1] for a in body.get("guestAccelerators", [])), "")
        accelerator = accelerator or next((gpu for family, gpu in BUILT_IN_ACCELERATORS.items()
                                           if machine.startswith(family)), "")
        scheduling = body.get("scheduling") or {}
        spot = scheduling.get("provisioningModel") == "SPOT"
        run_limited = (scheduling.get("instanceTerminationAction") == "DELETE"
                       and 0 < int((scheduling.get("maxRunDuration") or {}).get("seconds", 0)) <= 7 * 86400)
        error = self.quota_error(region, machine, accelerator, spot, run_limited)
        if not error and self.capacity.get(zone, 1) <= 0:
            error = (503, "ZONE_RESOURCE_POOL_EXHAUSTED",
                     f"The zone 'projects/{self.project}/zones/{zone}' does not have enough resources "
                     "available to fulfill the request.  Try a different zone, or try again later.")
        return error

    def _create_instance(self, zone: str, body: dict, link: str, private_ip: str) -> None:
        if zone in self.capacity:
            self.capacity[zone] -= 1
        number = next(self._addresses)  # like GCE, an address is not handed out twice at once
        nic: dict = dict(body["networkInterfaces"][0], networkIP=private_ip or f"10.128.0.{number}")
        if nic.get("accessConfigs"):
            nic["accessConfigs"] = [dict(nic["accessConfigs"][0], natIP=f"203.0.113.{number}")]
        disks = [self._attach_disk(zone, body["name"], disk, link) for disk in body["disks"]]
        machine = body["machineType"].rsplit("/", 1)[-1]
        self.instances[(zone, body["name"])] = dict(
            body, kind="compute#instance", id=str(next(self._ids)), status="PROVISIONING",
            zone=self._link(f"zones/{zone}"), selfLink=link, networkInterfaces=[nic], disks=disks,
            machineType=self._link(f"zones/{zone}/machineTypes/{machine}"))

    def _attach_disk(self, zone: str, instance: str, disk: dict, link: str) -> dict:
        """An instance's disk as GCE shows it attached (its source link and deviceName, not initializeParams);
        a new one (initializeParams) is made with the instance, a resource of its own from then on."""
        params = disk.get("initializeParams") or {}
        disk_name = params.get("diskName") or instance
        if params:
            self.disks[(zone, disk_name)] = {
                "kind": "compute#disk", "id": str(next(self._ids)), "name": disk_name,
                "sizeGb": str(params.get("diskSizeGb") or 10), "sourceImage": params.get("sourceImage", ""),
                "zone": self._link(f"zones/{zone}"), "status": "READY", "users": [link],
                "selfLink": self._link(f"zones/{zone}/disks/{disk_name}")}
        shown = {k: v for k, v in disk.items() if k != "initializeParams"}
        return dict(shown, source=self._link(f"zones/{zone}/disks/{disk_name}"),
                    deviceName=disk.get("deviceName") or disk_name, autoDelete=bool(disk.get("autoDelete")))

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

    def _delete_disk(self, zone: str, name: str) -> dict:
        disk = self._get(self.disks, (zone, name), f"zones/{zone}/disks/{name}")
        if disk.get("users"):
            raise ApiError(400, f"The disk resource '{disk['selfLink']}' is already being used by "
                                f"'{disk['users'][0]}'", "resourceInUseByAnotherResource")
        del self.disks[(zone, name)]
        self.iam_policies.pop(("disks", zone, name), None)
        return self._operation(zone, "delete", disk["selfLink"])

    def _serial_port(self, zone: str, name: str, query: dict) -> dict:
        """getSerialPortOutput: the console from byte `start` on, and where the next read starts."""
        inst = self._get(self.instances, (zone, name), f"zones/{zone}/instances/{name}")
        text = self.serial_port_output(zone, name) if self.serial_port_output else ""
        data = text.encode()
        start = min(int((query.get("start") or ["0"])[0]), len(data))
        return {"kind": "compute#serialPortOutput", "contents": data[start:].decode(errors="replace"),
                "start": str(start), "next": str(len(data)), "selfLink": inst["selfLink"] + "/serialPort"}


def _validate_instance(zone: str, body: dict) -> None:
    """An insert's body checked as GCE checks it (cloud.google.com/compute/docs/reference/rest/v1/instances)."""
    _validate_fields(zone, body)
    machine = body["machineType"].rsplit("/", 1)[-1]
    accelerators = body.get("guestAccelerators") or []
    _validate_accelerators(zone, machine, accelerators)
    _validate_scheduling(body.get("scheduling") or {},
                         has_gpu=bool(accelerators) or machine.startswith(BUILT_IN_GPU_FAMILIES))


def _validate_fields(zone: str, body: dict) -> None:
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


def _validate_accelerators(zone: str, machine: str, accelerators: list[dict]) -> None:
    for acc in accelerators:
        acc_zone = re.search(r"zones/([^/]+)/acceleratorTypes/", acc.get("acceleratorType", ""))
        if not acc_zone or acc_zone.group(1) != zone:
            raise bad_request(f"Invalid value for field 'resource.guestAccelerators[0].acceleratorType': "
                              f"'{acc.get('acceleratorType')}'. Accelerator type must be in zone {zone}.")
    if accelerators and machine.startswith(BUILT_IN_GPU_FAMILIES):
        raise bad_request(f"Machine type {machine} has GPUs attached; guestAccelerators must not be set.")
    if accelerators and not machine.startswith("n1-"):
        raise bad_request(f"Accelerators can only be attached to N1 machine types, not {machine}.")


def _validate_scheduling(scheduling: dict, *, has_gpu: bool) -> None:
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
