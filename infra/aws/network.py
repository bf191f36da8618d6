"""Per-cluster security group and key pair.

The group admits SSH only from the caller's address and all traffic only between its own members:
Ray's ports and the dashboard are never opened to the world (dlrun reaches them through SSH).
"""
from __future__ import annotations


from botocore.exceptions import ClientError

from infra.base import TAG_CLUSTER



def resource_name(cluster_id: str) -> str:
    return f"dlrun-{cluster_id}"


def tag_spec(resource_type: str, tags: dict[str, str]) -> dict:
    return {"ResourceType": resource_type, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def find_security_groups(ec2, cluster_id: str) -> list[dict]:
    by_tag = ec2.describe_security_groups(
        Filters=[{"Name": f"tag:{TAG_CLUSTER}", "Values": [cluster_id]}])["SecurityGroups"]
    by_name = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [resource_name(cluster_id)]}])["SecurityGroups"]
    seen = {g["GroupId"]: g for g in by_tag + by_name}
    return list(seen.values())


def ensure_security_group(ec2, cluster_id: str, tags: dict[str, str], ssh_cidr: str,
                          vpc_id: str) -> tuple[str, bool]:
    """(group id, created): the cluster's group in `vpc_id` (infra/aws/vpc.py chose it), created with its
    two rules when missing. Always with VpcId: without one EC2 answers VPCIdNotSpecified where the account
    has no default VPC."""
    existing = [g for g in find_security_groups(ec2, cluster_id) if g.get("VpcId") in (None, vpc_id)]
    if existing:
        return existing[0]["GroupId"], False
    group_id = ec2.create_security_group(
        GroupName=resource_name(cluster_id), VpcId=vpc_id,
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


def register_key(ec2, cluster_id: str, tags: dict[str, str]) -> tuple[str, bool]:
    """(key pair name, registered now): the cluster's local public key imported as an EC2 key pair.

    A key pair whose private half is no longer here is replaced (an instance could not be reached).
    """
    from infra.vm.keys import ensure_cluster_key, key_path

    name = resource_name(cluster_id)
    had_private = key_path(cluster_id).exists()
    _, public = ensure_cluster_key(cluster_id)
    if name in find_key_pairs(ec2, cluster_id):
        if had_private:
            return name, False
        ec2.delete_key_pair(KeyName=name)
    ec2.import_key_pair(KeyName=name, PublicKeyMaterial=public.encode(),
                        TagSpecifications=[tag_spec("key-pair", tags)])
    return name, True


def delete_key_pair(ec2, name: str) -> None:
    try:
        ec2.delete_key_pair(KeyName=name)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") != "InvalidKeyPair.NotFound":
            raise
