"""The fake Compute Engine's callers and IAM (a FakeGce mixin): who a request is, what a VM's service account
may do, resource IAM policies, and service accounts Compute Engine does not know yet.

Real behaviours it reproduces:
- callers: a request without credentials is the project's owner (dlrun's own login, AnonymousCredentials);
  `Authorization: Bearer sa:EMAIL` (what tests/support/gce_metadata.py hands a VM) is that service account,
  which may do only what IAM policies on the *resource* grant it (instances/disks setIamPolicy,
  cloud.google.com/compute/docs/access/iam-policies-for-compute-engine-resources), and only with a token
  whose scopes (the scopes of the instance it runs on) include compute or cloud-platform: else 403
  "Request had insufficient authentication scopes." / "Required 'compute.instances.delete' permission";
- IAM's eventual consistency: with `iam` (a FakeGcs, whose `accounts` IAM serves), an insert naming an
  account IAM does not have, or one made less than `account_lag` inserts ago, answers 400
  "Invalid value for field 'resource.serviceAccounts[0].email': ..." [message shape as GCE's field
  errors; the exact text for a not-yet-propagated account is not documented];
- IAM policy changes propagate late: with `iam_lag_s`, a resource's new policy is not enforced for that
  long (cloud.google.com/iam/docs/access-change-propagation).
Not reproduced: etags of IAM policies (a setIamPolicy always wins), custom roles, conditions, project-level
policies for service accounts (a VM's account may act only through resource policies here).
"""
from __future__ import annotations

import time

from tests.support.gce_errors import PREFIX, ApiError, bad_request
from tests.support.gce_state import GceState

# roles that hold compute.instances.delete / compute.disks.delete (and get) on the resource they are granted on
DELETE_ROLES = {"roles/owner", "roles/editor", "roles/compute.admin", "roles/compute.instanceAdmin",
                "roles/compute.instanceAdmin.v1"}
COMPUTE_SCOPES = {"https://www.googleapis.com/auth/compute", "https://www.googleapis.com/auth/cloud-platform"}


class IamApi(GceState):
    """Mixed into FakeGce (the tables and helpers of GceState), with these settings of its own."""

    account_lag: int
    iam_lag_s: float
    _policy_set_at: dict  # (kind, zone, name) -> when its IAM policy was set (iam_lag_s)
    _account_refusals: dict  # email -> inserts still to refuse (account_lag)

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

    # ------------------------------------------------------------ resource policies
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

    # ------------------------------------------------------------ accounts an insert names
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


def account_of(authorization: str) -> str | None:
    """The service account a bearer token stands for ("sa:EMAIL", tests/support/gce_metadata.py), or None:
    no token is dlrun's own login, the project's owner."""
    token = authorization[len("Bearer "):].strip() if authorization.startswith("Bearer ") else ""
    return token[3:] if token.startswith("sa:") else None


def _permission_of(method: str, parts: list[str]) -> str:
    kind = next((p for p in reversed(parts[1::2]) if p), "projects") if parts else "projects"
    return f"{kind}.{ {'GET': 'get', 'POST': 'create', 'DELETE': 'delete'}.get(method, 'update')}"
