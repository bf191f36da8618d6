"""The caller's address for SSH ingress: the only port a dlrun cluster opens to the outside."""
from __future__ import annotations

import ipaddress
import os
import urllib.request

from infra.base import ProvisionError

SSH_CIDR_ENV = "DLRUN_SSH_CIDR"
CHECKIP_URLS = ("https://checkip.amazonaws.com", "https://api.ipify.org")
CHECKIP_TIMEOUT_S = 3.0


def checked_cidr(cidr: str, cloud: str = "") -> str:
    """A valid, non-world CIDR (a bare address becomes /32 or /128)."""
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError as e:
        raise ProvisionError(f"invalid SSH source address {cidr!r}: {e}", cloud=cloud) from None
    if net.prefixlen == 0:
        raise ProvisionError(f"refusing to open SSH to the whole internet ({cidr}); give your own "
                             f"address, e.g. {SSH_CIDR_ENV}=203.0.113.7/32", cloud=cloud)
    return str(net)


def discover_caller_cidr(urls: tuple[str, ...] | None = None, timeout: float = CHECKIP_TIMEOUT_S) -> str | None:
    """This machine's public address as /32 (or /128), or None when no lookup service answers."""
    for url in urls or CHECKIP_URLS:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                address = ipaddress.ip_address(resp.read(100).decode("ascii", "replace").strip())
            return f"{address}/{address.max_prefixlen}"
        except (OSError, ValueError):
            continue
    return None


def resolve_ssh_cidr(*candidates: str | None, cloud: str = "") -> str:
    """The first given CIDR, else $DLRUN_SSH_CIDR, else the discovered address; one clear error if none."""
    cidr = next((c for c in candidates if c), None) or os.environ.get(SSH_CIDR_ENV) or discover_caller_cidr()
    if not cidr:
        raise ProvisionError("could not find this machine's public address for the SSH firewall rule "
                             f"(no address lookup answered); set {SSH_CIDR_ENV}, e.g. 203.0.113.7/32 "
                             "— dlrun never opens SSH to 0.0.0.0/0", cloud=cloud)
    return checked_cidr(cidr, cloud)
