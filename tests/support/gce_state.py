"""What the parts of the fake Compute Engine share (tests/support/gce_server.py's FakeGce and its per-resource
mixins): its tables and the helpers one part defines and another calls, declared once for the type checker.
Nothing here exists at run time but the class: FakeGce and its mixins define every member."""
from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any, Callable


class GceState:
    project: str
    instances: dict  # (zone, name) -> instance JSON
    disks: dict  # (zone, name) -> disk JSON
    operations: dict  # (zone or "global", name) -> operation JSON
    firewalls: dict  # name -> firewall JSON
    common_metadata: dict  # the project's common instance metadata, key -> value
    iam_policies: dict  # ("instances"|"disks", zone, name) -> IAM policy JSON
    iam: Any  # a FakeGcs (tests/support/gcs_server.py), whose `accounts` IAM serves; None: not checked
    serial_port_output: Callable[[str, str], str] | None
    _lock: threading.RLock
    _ids: itertools.count
    _addresses: itertools.count

    if TYPE_CHECKING:  # defined by FakeGce or a mixin; declared here only, so that none shadows another
        def _link(self, rest: str) -> str: ...

        def _get(self, table: dict, key: Any, what: str) -> dict: ...

        def _operation(self, zone: str, kind: str, target: str, *, done: bool = False,
                       error: tuple | None = None, user: str = "dlrun@example.com") -> dict: ...

        def _poll(self, key: Any, what: str) -> dict: ...

        def _delete_instance(self, zone: str, name: str, user: str = "dlrun@example.com") -> dict: ...

        def _set_iam_policy(self, kind: str, zone: str, name: str, body: dict) -> dict: ...

        def _check_accounts(self, body: dict) -> None: ...

        def quota_error(self, region: str, machine: str, accelerator: str, spot: bool,
                        run_limited: bool) -> tuple | None: ...

        def network_named(self, ref: str) -> dict: ...

        def attach(self, zone: str, nic: dict) -> str: ...

        def check_offered(self, zone: str, body: dict) -> None: ...
