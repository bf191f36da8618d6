"""A fake GCE metadata server: what a process on a GCP node finds at 169.254.169.254 / metadata.google.internal.

Real behaviour reproduced (cloud.google.com/compute/docs/metadata/predefined-metadata-keys,
docs/metadata/querying-metadata, docs/access/authenticate-workloads#applications):
- every request needs the header `Metadata-Flavor: Google` (else 403 "Missing Metadata-Flavor:Google
  header."), every answer carries it;
- project/project-id, project/numeric-project-id; instance/name, instance/id, instance/hostname,
  instance/zone as `projects/NUMBER/zones/ZONE`, instance/preempted (`TRUE` once GCE preempted a spot VM),
  instance/attributes/KEY (the instance's metadata items);
- instance/service-accounts/{default,EMAIL}/ (?recursive=true JSON), .../email, .../scopes and .../token
  (`{"access_token", "expires_in", "token_type"}`) for the account the instance runs as; an instance
  without one has no service-accounts entries (404).
The token is "sa:EMAIL", which tests/support/gcs_server.py and gce_server.py read as that account. A process
pointed at it with GCE_METADATA_HOST and GCE_METADATA_IP (read by google.auth at import: a fresh process)
is, to google.auth.default(), a VM running as that account.

Two ways to make one: FakeGceMetadata(email, project, scopes) answers for an account only (no instance);
FakeGceMetadata.of_instance(fake_gce, zone, name) answers for one instance of a FakeGce, live (its
preemption, its metadata as they are at the time of the request). The lab serves the handler inside
each GCE VM's network namespace (tests/support/vm/metadata.py). Not reproduced: wait-for-change, ETags,
guest attributes, identity tokens.
"""
from __future__ import annotations

import json

from tests.support.http import LocalHttpServer, QuietHandler

BASE = "/computeMetadata/v1/"
PROJECT_NUMBER = "1234567890"  # the fake project's number (gce_network.py's projects.get answers it too)


class FakeGceMetadata(LocalHttpServer):
    def __init__(self, email: str | None, project: str, scopes: list[str], *, instance=None):
        self.email, self.project, self.scopes = email, project, scopes
        self.instance = instance  # () -> (zone, instance JSON or None), for an instance's own keys
        self.requests: list[str] = []

    @classmethod
    def of_instance(cls, gce, zone: str, name: str) -> "FakeGceMetadata":
        def lookup():
            with gce._lock:
                inst = gce.instances.get((zone, name))
                preempted = any(o["operationType"] == "compute.instances.preempted" and o["targetLink"].endswith(
                    f"/zones/{zone}/instances/{name}") for (z, _), o in gce.operations.items() if z == zone)
                return zone, (dict(inst, _preempted=preempted) if inst else None)
        return cls(None, gce.project, [], instance=lookup)

    def make_handler(self):
        return handler_for(self)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def account(self) -> tuple[str, list[str]] | None:
        if self.instance is None:
            return (self.email, self.scopes) if self.email else None
        _, inst = self.instance()
        accounts = (inst or {}).get("serviceAccounts") or []
        return (accounts[0]["email"], list(accounts[0].get("scopes") or [])) if accounts else None

    def answer(self, path: str, query: str = "") -> tuple[int, str, str]:
        if path == "/":
            return 200, "text/plain", ""
        text = {f"{BASE}project/project-id": self.project, f"{BASE}project/numeric-project-id": PROJECT_NUMBER}
        if path in text:
            return 200, "application/text", text[path]
        if path.startswith(f"{BASE}instance/service-accounts/"):
            return self._account_answer(path[len(f"{BASE}instance/service-accounts/"):], query)
        if self.instance is not None and path.startswith(f"{BASE}instance/"):
            zone, inst = self.instance()
            if inst is None:
                return 404, "text/plain", "not found"
            key = path[len(f"{BASE}instance/"):]
            items = {i["key"]: i.get("value", "") for i in (inst.get("metadata") or {}).get("items", [])}
            values = {"name": inst["name"], "id": inst["id"], "hostname": f"{inst['name']}.c.{self.project}.internal",
                      "zone": f"projects/{PROJECT_NUMBER}/zones/{zone}",
                      "preempted": "TRUE" if inst.get("_preempted") else "FALSE"}
            if key in values:
                return 200, "application/text", values[key]
            if key.startswith("attributes/") and key[len("attributes/"):] in items:
                return 200, "application/text", items[key[len("attributes/"):]]
        return 404, "text/plain", "not found"

    def _account_answer(self, rest: str, query: str) -> tuple[int, str, str]:
        account = self.account()
        if account is None:
            return 404, "text/plain", "not found"
        email, scopes = account
        # the account answers as `default` and as its email, as on GCE: google.auth asks by email once it
        # knows it (a second refresh in the same process)
        name, _, what = rest.partition("/")
        if name not in ("default", email):
            return 404, "text/plain", "not found"
        if what == "":  # ?recursive=true
            return 200, "application/json", json.dumps({"email": email, "scopes": scopes, "aliases": ["default"]})
        if what == "email":
            return 200, "application/text", email
        if what == "scopes":
            return 200, "application/text", "\n".join(scopes)
        if what == "token":
            return 200, "application/json", json.dumps({"access_token": f"sa:{email}", "expires_in": 3599,
                                                        "token_type": "Bearer"})
        return 404, "text/plain", "not found"


def handler_for(fake: FakeGceMetadata):
    class Handler(QuietHandler):
        def do_GET(self):
            path, _, query = self.path.partition("?")
            fake.requests.append(path)
            if self.headers.get("Metadata-Flavor") != "Google":
                status, ctype, body = 403, "text/plain", "Missing Metadata-Flavor:Google header."
            else:
                status, ctype, body = fake.answer(path, query)
            self.reply(status, body.encode(), ctype, {"Metadata-Flavor": "Google"})

    return Handler
