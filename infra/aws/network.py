"""Per-cluster security group and key pair, and finding the caller's address for SSH ingress.

The group admits SSH only from the caller's address and all traffic only between its own members:
Ray's ports and the dashboard are never opened to the world (dlrun reaches them through SSH).
"""
from __future__ import annotations

import ipaddress
import os
import urllib.request
from pathlib import Path

from botocore.exceptions import ClientError

from infra.base import TAG_CLUSTER, ProvisionError
from infra.paths import keys_dir

CHECKIP_URL = "https://checkip.amazonaws.com"
CHECKIP_TIMEOUT_S = 3.0


def resource_name(cluster_id: str) -> str:
    return f"dlrun-{cluster_id}"


def key_path(cluster_id: str) -> Path:
    return keys_dir() / f"{cluster_id}.pem"


def tag_spec(resource_type: str, tags: dict[str, str]) -> dict:
    return {"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def checked_cidr(cidr: str) -> str:
    """A valid, non-world CIDR (a bare address becomes /32 or /128)."""
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError as e:
        raise ProvisionError(f"invalid SSH source address {cidr!r}: {e}", cloud="aws") from None
    if net.prefixlen == 0:
        raise ProvisionError(f"refusing to open SSH to the whole internet ({cidr}); "
                             "give your own address, e.g. --ssh-cidr 203.0.113.7/32", cloud="aws")
    return str(net)


def discover_caller_cidr(url: str | None = None, timeout: float | None = None) -> str:
    """This machine's public address as a /32, asked from checkip.amazonaws.com."""
    url = url or CHECKIP_URL
    try:
        with urllib.request.urlopen(url, timeout=timeout or CHECKIP_TIMEOUT_S) as resp:
            text = resp.read(100).decode("ascii", "replace").strip()
        address = ipaddress.ip_address(text)
    except (OSError, ValueError) as e:
        raise ProvisionError(
            f"could not find this machine's public address for SSH ingress ({url}: {e}); "
            "set ssh_cidr (e.g. 203.0.113.7/32) in the config", cloud="aws") from None
    return f"{address}/{address.max_prefixlen}"


def find_security_groups(ec2, cluster_id: str) -> list[dict]:
    by_tag = ec2.describe_security_groups(
        Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]}])["SecurityGroups"]
    by_name = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [resource_name(cluster_id)]}])["SecurityGroups"]
    seen = {g["GroupId"]: g for g in by_tag + by_name}
    return list(seen.values())


def ensure_security_group(ec2, cluster_id: str, tags: dict[str, str], ssh_cidr: str) -> tuple[str, bool]:
    """(group id, created): the cluster's group, created with its two rules when missing."""
    existing = find_security_groups(ec2, cluster_id)
    if existing:
        return existing[0]["GroupId"], False
    group_id = ec2.create_security_group(
        GroupName=resource_name(cluster_id),
        Description=f"dlrun cluster {cluster_id}: SSH from the caller, all traffic between members",
        TagSpecifications=[tag_spec("security-group", tags)],
    )["GroupId"]
    try:
        ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
             "IpRanges": [{"CidrIp": ssh_cidr, "Description": "dlrun: SSH from the caller"}]}
            if ":" not in ssh_cidr else
            {"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
             "Ipv6Ranges": [{"CidrIpv6": ssh_cidr, "Description": "dlrun: SSH from the caller"}]},
            {"IpProtocol": "-1", "UserIdGroupPairs": [
                {"GroupId": group_id, "Description": "dlrun: cluster members"}]},
        ])
    except BaseException:
        delete_security_group(ec2, group_id)
        raise
    return group_id, True


def delete_security_group(ec2, group_id: str) -> None:
    try:
        ec2.delete_security_group(GroupId=group_id)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "InvalidGroup.NotFound":
            raise


def find_key_pairs(ec2, cluster_id: str) -> list[str]:
    by_tag = ec2.describe_key_pairs(
        Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]}])["KeyPairs"]
    by_name = ec2.describe_key_pairs(
        Filters=[{"Name": "key-name", "Values": [resource_name(cluster_id)]}])["KeyPairs"]
    return sorted({k["KeyName"] for k in by_tag + by_name})


def ensure_key_pair(ec2, cluster_id: str, tags: dict[str, str]) -> tuple[str, Path, bool]:
    """(key name, private key file, created). An AWS key whose private half we lost is replaced."""
    name, path = resource_name(cluster_id), key_path(cluster_id)
    if name in find_key_pairs(ec2, cluster_id):
        if path.exists():
            return name, path, False
        ec2.delete_key_pair(KeyName=name)
    material = ec2.create_key_pair(KeyName=name, KeyType="ed25519",
                                   TagSpecifications=[tag_spec("key-pair", tags)])["KeyMaterial"]
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(material if material.endswith("\n") else material + "\n")
    return name, path, True


def delete_key_pair(ec2, name: str, cluster_id: str) -> None:
    try:
        ec2.delete_key_pair(KeyName=name)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "InvalidKeyPair.NotFound":
            raise
    path = key_path(cluster_id)
    if path.exists():
        path.unlink()
