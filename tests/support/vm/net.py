"""The lab's network: one Linux bridge, and per VM one network namespace joined to it by a veth pair.

Why: a VM must hold the private IP its fake cloud reported, reach its peers at their private IPs and be
reachable from this machine (the root namespace) for SSH, while never having a route off this machine.

- Inside a VM: `lo` up, `eth0` holding PRIVATE_IP/32, on-link routes for the RFC 1918 ranges (so every
  peer on the bridge is reached directly, whatever subnet its cloud put it in) and for the bridge's own
  address. No default route, no NAT, and forwarding is off on the bridge, so nothing leaves the machine.
- In the root namespace: the bridge holds a link-local address 169.254.A.B/32 (unique per lab, outside
  every cloud's ranges) and one /32 route per VM address through the bridge, used as the source for SSH.
- The VM's public IP (as its cloud reported it) is a second address on its eth0, routed to the bridge
  too: a direct connection to it (not through lab.ssh_config) reaches the VM, never the internet (moto's
  public IPs are real-looking addresses).
- Each VM also holds a lab address, 169.254.A.B/32, unique on this machine, always routed to it: the
  clouds' addresses are not (the fake GCE gives every project 10.128.0.2 first), and two labs running at
  once (two test sessions on one machine) may hold VMs with the same address. Such an address is routed
  to the first lab's VM only; the second reaches its VM through the lab address (lab.ssh_config maps the
  public and private IPs onto it), so dlrun's SSH never reaches the other lab's VM.
  The VM talks to its lab's servers (mirrors, registry) from that lab address too (its route to the
  bridge's address names it as source): from its private IP, the answer would go to the other lab's VM.

Every name starts with PREFIX + the lab's 4 hex digits, so two labs or the debris of a crashed run never
collide; `remove_stale` deletes debris whose lab is no longer alive (see LabNetwork.remove_lab).
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess

PREFIX = "dlv"
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
NAME_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{4}})")


class VmNetworkError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise VmNetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def our_netns() -> list[str]:
    """Every network namespace named by any lab (ours or another's)."""
    return [line.split()[0] for line in ip("netns", "list", check=False).splitlines()
            if line and NAME_RE.match(line.split()[0])]


def our_links() -> list[str]:
    names = [line.split()[1].split("@")[0].rstrip(":") for line in ip("-o", "link", "show").splitlines()]
    return [n for n in names if NAME_RE.match(n)]


def lab_id_of(name: str) -> str | None:
    m = NAME_RE.match(name)
    return m.group(1) if m else None


class LabNetwork:
    def __init__(self, lab_id: str):
        self.lab_id = lab_id
        self.prefix = f"{PREFIX}{lab_id}"
        self.bridge = f"{self.prefix}br"
        n = int(lab_id, 16)
        self.host_ip = f"169.254.{1 + n % 254}.{1 + (n // 254) % 254}"

    def netns(self, index: int) -> str:
        return f"{self.prefix}-{index}"

    def veth(self, index: int) -> str:
        return f"{self.prefix}h{index}"

    # ------------------------------------------------------------ lifecycle
    def create(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        with open(f"/proc/sys/net/ipv4/conf/{self.bridge}/forwarding", "w") as f:
            f.write("0")  # packets from a VM are never forwarded anywhere, whatever ip_forward says
        ip("addr", "add", f"{self.host_ip}/32", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add_vm(self, index: int, addresses: list[str]) -> tuple[str, str, list[str]]:
        """Creates the VM's namespace with eth0 holding `addresses` (private IP first, then the public one)
        and a lab address on the bridge; returns (netns name, lab address, the addresses routed to it)."""
        lab_address = self._free_lab_address()
        routed = [a for a in addresses if not _routed(a)]
        ns, host_end, peer = self.netns(index), self.veth(index), f"{self.prefix}p{index}"
        try:
            ip("netns", "add", ns)
            ip("link", "add", host_end, "type", "veth", "peer", "name", peer, "netns", ns)
            for args in (("link", "set", peer, "name", "eth0"),
                         *(("addr", "add", f"{a}/32", "dev", "eth0") for a in [*addresses, lab_address]),
                         ("link", "set", "lo", "up"),
                         ("link", "set", "eth0", "up"),
                         # from the lab address: the host answers a VM's private IP through the first lab
                         # that routed it, which is another lab's VM when two labs share an address
                         ("route", "add", f"{self.host_ip}/32", "dev", "eth0", "src", lab_address),
                         *(("route", "add", r, "dev", "eth0") for r in PRIVATE_RANGES)):
                ip("-n", ns, *args)
            ip("link", "set", host_end, "master", self.bridge, "up")
            ip("route", "add", f"{lab_address}/32", "dev", self.bridge, "src", self.host_ip)
            for address in list(routed):
                try:  # (another lab may have taken it since)
                    ip("route", "add", f"{address}/32", "dev", self.bridge, "src", self.host_ip)
                except VmNetworkError:
                    routed.remove(address)
        except Exception:
            self.remove_vm(index, [lab_address, *routed])
            raise
        return ns, lab_address, [lab_address, *routed]

    def _free_lab_address(self) -> str:
        for _ in range(100):
            a, b = random.randint(1, 254), random.randint(1, 254)
            address = f"169.254.{a}.{b}"
            if a != 169 and address != self.host_ip and not _routed(address) and not _assigned(address):
                return address
        raise VmNetworkError("no free lab address in 169.254.0.0/16")

    def remove_vm(self, index: int, routed: list[str]) -> None:
        """Removes the VM's namespace and link, and the routes `add_vm` made (`routed`)."""
        for address in routed:
            ip("route", "del", f"{address}/32", "dev", self.bridge, check=False)
        ip("link", "del", self.veth(index), check=False)
        ip("netns", "del", self.netns(index), check=False)

    def close(self) -> None:
        remove_lab(self.lab_id)

    # ------------------------------------------------------------ inspection
    def routes(self) -> list[str]:
        """The /32 routes to VMs in the root namespace."""
        out = ip("-o", "route", "show", "dev", self.bridge, check=False)
        return [line.split()[0] for line in out.splitlines() if line.strip()]

    def present(self) -> list[str]:
        """Every network object of this lab that exists now, as 'netns NAME' / 'link NAME'."""
        return ([f"netns {n}" for n in our_netns() if n.startswith(self.prefix)]
                + [f"link {n}" for n in our_links() if n.startswith(self.prefix)])


def _routed(address: str) -> bool:
    return bool(ip("-o", "route", "show", "to", "exact", f"{address}/32", check=False).strip())


def _assigned(address: str) -> bool:
    return bool(ip("-o", "addr", "show", "to", f"{address}/32", check=False).strip())


def netns_pids(name: str) -> list[int]:
    return [int(p) for p in ip("netns", "pids", name, check=False).split()]


def remove_lab(lab_id: str) -> None:
    """Deletes every namespace and link of one lab, SIGKILLing whatever still runs in its namespaces."""
    prefix = f"{PREFIX}{lab_id}"
    for ns in [n for n in our_netns() if n.startswith(prefix)]:
        for pid in netns_pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        ip("netns", "del", ns, check=False)
    for link in [n for n in our_links() if n.startswith(prefix)]:
        ip("link", "del", link, check=False)


def remove_stale(alive: set[str]) -> list[str]:
    """Removes the network debris of every lab whose id is not in `alive`; returns those lab ids."""
    stale = {lab_id_of(n) for n in our_netns() + our_links()} - set(alive) - {None}
    for lab_id in sorted(stale):
        remove_lab(lab_id)
    return sorted(stale)
