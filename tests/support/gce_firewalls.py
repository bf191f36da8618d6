"""The fake Compute Engine's firewall rules (a FakeGce mixin): global firewalls insert/get/list/delete.

As the real REST API: name, network and allowed-or-denied are required, a rule needs sourceRanges or
sourceTags, the network must exist, a name is taken once (409 alreadyExists), direction defaults to INGRESS
(cloud.google.com/compute/docs/reference/rest/v1/firewalls); a firewall keeps its network from being deleted
(gce_network.py). Every change is a global operation.
Not reproduced: priorities, target tags or service accounts deciding which instances a rule applies to (no
traffic flows through the fake), egress rules' defaults, patch/update.
"""
from __future__ import annotations

from tests.support.gce_errors import NAME_RE, ApiError, bad_request
from tests.support.gce_lists import filtered, listing
from tests.support.gce_state import GceState


class FirewallApi(GceState):
    """Mixed into FakeGce: the firewalls table and helpers of GceState."""

    def _route_firewall(self, method: str, parts: list[str], query: dict, body: dict | None) -> dict | None:
        """The answer for a firewall path, or None when the path is not one."""
        match parts, method:
            case ["global", "firewalls"], "POST":
                return self._insert_firewall(body or {})
            case ["global", "firewalls"], "GET":
                return listing("compute#firewallList", filtered(list(self.firewalls.values()), query))
            case ["global", "firewalls", name], "GET":
                return self._get(self.firewalls, name, f"global/firewalls/{name}")
            case ["global", "firewalls", name], "DELETE":
                fw = self._get(self.firewalls, name, f"global/firewalls/{name}")
                del self.firewalls[name]
                return self._operation("global", "delete", fw["selfLink"])
        return None

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
