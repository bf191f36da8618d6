"""The fake Compute Engine's project, VPC networks, subnetworks and zonal offerings (a FakeGce mixin).

As the real REST API: `projects.get` returns the project's common metadata (where `enable-oslogin`
lives); networks are global (`autoCreateSubnetworks: false` is a custom-mode VPC, whose instances must
name a subnetwork), subnetworks regional (their operations are region operations), a subnetwork's
range may not overlap another of the same network, and a network still used by a subnetwork, firewall
or instance cannot be deleted. A zone that does not offer an accelerator or machine type rejects the
insert at once with HTTP 400, as GCE does (`The resource '.../acceleratorTypes/nvidia-tesla-p100' was
not found`; `Machine type with name 'a2-highgpu-1g' does not exist in zone 'us-central1-f'`).
"""
from __future__ import annotations

import ipaddress
import re

from tests.support.gce_errors import NAME_RE, ApiError, bad_request
from tests.support.gce_state import GceState

# the GPU an accelerator-optimized machine family comes with
BUILT_IN_ACCELERATORS = {"a2-": "nvidia-tesla-a100", "a3-": "nvidia-h100-80gb", "g2-": "nvidia-l4"}


class NetworkApi(GceState):
    """Mixed into FakeGce (the tables and helpers of GceState), with these of its own."""

    networks: dict  # name -> network JSON
    subnetworks: dict  # (region, name) -> subnetwork JSON
    zone_offerings: dict  # zone -> accelerator types it offers (a zone not listed offers all)
    _subnet_next: dict  # subnetwork link -> the next host number it hands out
    _address_seed: int  # where this fake's addresses start (random: FakeGce.__post_init__)

    # ------------------------------------------------------------ test helpers
    def offer_only(self, zone: str, *accelerator_types: str) -> None:
        """This zone offers just these accelerator types (and the machine families that carry them)."""
        self.zone_offerings[zone] = set(accelerator_types)

    def add_default_network(self) -> None:
        """The auto-mode `default` network GCE makes in a new project (unless an org policy skips it)."""
        with self._lock:
            self.networks["default"] = {"kind": "compute#network", "name": "default", "id": str(next(self._ids)),
                                        "autoCreateSubnetworks": True, "subnetworks": [],
                                        "selfLink": self._link("global/networks/default")}

    def set_project_metadata(self, **items: str) -> None:
        self.common_metadata.update({k.replace("_", "-"): v for k, v in items.items()})

    # ------------------------------------------------------------ routes
    def _route_network(self, method: str, parts: list[str], body: dict | None) -> dict | None:
        """The answer for a project/network/subnetwork path, or None when the path is not one."""
        match parts, method:
            case [""], "GET":
                return self._project()
            case ["global", "networks"], "POST":
                return self._insert_network(body or {})
            case ["global", "networks"], "GET":
                return {"kind": "compute#networkList", "items": list(self.networks.values())}
            case ["global", "networks", name], "GET":
                return self._get(self.networks, name, f"global/networks/{name}")
            case ["global", "networks", name], "DELETE":
                return self._delete_network(name)
            case ["regions", region, "subnetworks"], "POST":
                return self._insert_subnetwork(region, body or {})
            case ["regions", region, "subnetworks"], "GET":
                return {"kind": "compute#subnetworkList",
                        "items": [s for (r, _), s in self.subnetworks.items() if r == region]}
            case ["regions", region, "subnetworks", name], "GET":
                return self._get(self.subnetworks, (region, name), f"regions/{region}/subnetworks/{name}")
            case ["regions", region, "subnetworks", name], "DELETE":
                sub = self._get(self.subnetworks, (region, name), f"regions/{region}/subnetworks/{name}")
                self._refuse_if_used(sub["selfLink"], "subnetwork")
                del self.subnetworks[(region, name)]
                return self._operation(f"region:{region}", "delete", sub["selfLink"])
            case ["regions", region, "operations", name, *_wait], _:
                return self._poll((f"region:{region}", name), f"regions/{region}/operations/{name}")
        return None

    def _project(self) -> dict:
        items = [{"key": k, "value": v} for k, v in self.common_metadata.items()]
        return {"kind": "compute#project", "name": self.project, "id": "1234567890",
                "commonInstanceMetadata": {"kind": "compute#metadata", "items": items},
                "selfLink": self._link("")[:-1]}

    def _insert_network(self, body: dict) -> dict:
        name = body.get("name") or ""
        if not NAME_RE.match(name):
            raise bad_request(f"Invalid value for field 'resource.name': '{name}'.")
        if name in self.networks:
            raise ApiError(409, f"The resource 'projects/{self.project}/global/networks/{name}' already exists",
                           "alreadyExists")
        link = self._link(f"global/networks/{name}")
        self.networks[name] = dict(body, kind="compute#network", id=str(next(self._ids)), selfLink=link,
                                   subnetworks=[])
        return self._operation("global", "insert", link)

    def _delete_network(self, name: str) -> dict:
        net = self._get(self.networks, name, f"global/networks/{name}")
        self._refuse_if_used(net["selfLink"], "network")
        del self.networks[name]
        return self._operation("global", "delete", net["selfLink"])

    def _refuse_if_used(self, link: str, what: str) -> None:
        users = [s["selfLink"] for s in self.subnetworks.values() if self.same(s["network"], link)]
        users += [f["selfLink"] for f in self.firewalls.values() if self.same(f["network"], link)]
        users += [i["selfLink"] for i in self.instances.values()
                  for nic in i["networkInterfaces"] if self.same(nic.get(what, ""), link)]
        if users:
            raise ApiError(400, f"The {what} resource '{link}' is already being used by '{users[0]}'",
                           "resourceInUseByAnotherResource")

    def _insert_subnetwork(self, region: str, body: dict) -> dict:
        for key in ("name", "network", "ipCidrRange"):
            if not body.get(key):
                raise bad_request(f"Invalid value for field 'resource.{key}': ''. Must be specified.")
        name = body["name"]
        if (region, name) in self.subnetworks:
            raise ApiError(409, f"The resource 'projects/{self.project}/regions/{region}/subnetworks/{name}' "
                                "already exists", "alreadyExists")
        network = self.network_named(body["network"])
        cidr = ipaddress.ip_network(body["ipCidrRange"])
        for other in self.subnetworks.values():
            if self.same(other["network"], network["selfLink"]) and \
                    cidr.overlaps(ipaddress.ip_network(other["ipCidrRange"])):
                raise bad_request(f"Invalid IPCidrRange: {cidr} conflicts with existing subnetwork "
                                  f"'{other['name']}' in region '{other['region'].rsplit('/', 1)[-1]}'.")
        link = self._link(f"regions/{region}/subnetworks/{name}")
        self.subnetworks[(region, name)] = dict(
            body, kind="compute#subnetwork", id=str(next(self._ids)), selfLink=link, network=network["selfLink"],
            region=self._link(f"regions/{region}"), gatewayAddress=str(next(cidr.hosts())))
        self._subnet_next[link] = 2 + self._address_seed % max(1, cidr.num_addresses // 2 - 2)
        network["subnetworks"].append(link)
        return self._operation(f"region:{region}", "insert", link)

    # ------------------------------------------------------------ used by instances and firewalls
    def same(self, ref: str, link: str) -> bool:
        """A partial URL ('global/networks/x', 'projects/p/...') names the same resource as a full one."""
        return bool(ref) and link.endswith("/" + ref.split("/compute/v1/", 1)[-1].removeprefix(
            f"projects/{self.project}/"))

    def network_named(self, ref: str) -> dict:
        found = next((n for n in self.networks.values() if self.same(ref, n["selfLink"])), None)
        if found is None:
            raise bad_request(f"The resource 'projects/{self.project}/global/networks/"
                              f"{ref.rsplit('/', 1)[-1]}' was not found")
        return found

    def attach(self, zone: str, nic: dict) -> str:
        """Check an instance's network interface as GCE does; its internal address (from the subnetwork)."""
        network = self.network_named(nic.get("network") or "global/networks/default")
        region = zone.rsplit("-", 1)[0]
        if not nic.get("subnetwork"):
            if network.get("autoCreateSubnetworks") is False:
                raise bad_request("Invalid value for field 'resource.networkInterfaces[0]': ''. Subnetwork "
                                  "should be specified for custom subnetmode network")
            return ""
        m = re.search(r"regions/([^/]+)/subnetworks/([^/]+)$", nic["subnetwork"])
        sub = self.subnetworks.get((m.group(1), m.group(2))) if m else None
        if m is None or sub is None or m.group(1) != region:
            raise bad_request(f"Invalid value for field 'resource.networkInterfaces[0].subnetwork': "
                              f"'{nic['subnetwork']}'. The referenced subnetwork resource cannot be found.")
        if not self.same(nic["network"], sub["network"]):
            raise bad_request("Invalid value for field 'resource.networkInterfaces[0].subnetwork': the "
                              "subnetwork does not belong to the network.")
        address = ipaddress.ip_network(sub["ipCidrRange"]).network_address + self._subnet_next[sub["selfLink"]]
        self._subnet_next[sub["selfLink"]] += 1  # like GCE, an address is not handed out twice
        return str(address)

    def check_offered(self, zone: str, body: dict) -> None:
        offered = self.zone_offerings.get(zone)
        if offered is None:
            return
        machine = body["machineType"].rsplit("/", 1)[-1]
        built_in = next((gpu for prefix, gpu in BUILT_IN_ACCELERATORS.items() if machine.startswith(prefix)), None)
        if built_in and built_in not in offered:
            raise bad_request(f"Invalid value for field 'resource.machineType': '{body['machineType']}'. "
                              f"Machine type with name '{machine}' does not exist in zone '{zone}'.")
        for acc in body.get("guestAccelerators") or []:
            kind = acc["acceleratorType"].rsplit("/", 1)[-1]
            if kind not in offered:
                raise bad_request(f"The resource 'projects/{self.project}/zones/{zone}/acceleratorTypes/{kind}' "
                                  "was not found")
