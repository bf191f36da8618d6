"""An AWS account whose default VPC is gone (organisation baselines delete it), on moto, as unkind as EC2.

    with no_default_vpc(ec2_client_factory, regions=["us-east-1"]):
        ... dlrun launches ...

What real EC2 answers there, and what this fake does about it (EC2 API reference: API_CreateSecurityGroup,
API_RunInstances, API_CreateSubnet, API_Subnet, errors-overview; VPC user guide: default-vpc.html):
- The default VPC is deleted like any VPC once its subnets and internet gateway are gone; the region then has
  none (DescribeVpcs isDefault=true: empty). Done here through the API, as a user does it.
- CreateSecurityGroup without VpcId: `VPCIdNotSpecified` "No default VPC for this user". moto instead puts the
  group in the deleted VPC (its backend keeps the id it made at start): patched to refuse as EC2 does.
- RunInstances without SubnetId: `VPCIdNotSpecified` (no default VPC), `MissingInput` "No subnets found for the
  default VPC 'vpc-…'. Please specify a subnet." (a default VPC without subnets), "No default subnet for
  availability zone: '…'" (a zone without one). moto answers all three itself.
- CreateSubnet makes an ordinary subnet: DefaultForAz false, MapPublicIpOnLaunch false (a subnet maps public
  IPs only once ModifySubnetAttribute says so). moto makes the first subnet of a zone that zone's *default*
  subnet, public: patched to EC2's values. An instance in a subnet that maps no public IP has none (moto does
  that itself), so dlrun could not reach it: the fake makes a forgotten ModifySubnetAttribute visible.
- RunInstances with a security group of another VPC than the subnet's: `InvalidParameter` "Security group
  sg-… and subnet subnet-… belong to different networks." moto does not check: patched to refuse.
Not reproduced: route tables and internet gateways carry no traffic in moto (the emulated-VM lab reaches
instances by their addresses whatever the routes say); a VPC's DNS attributes; IPv6.
"""
from __future__ import annotations

import contextlib
from typing import Callable

from moto.ec2.exceptions import EC2ClientError, VPCIdNotSpecifiedError
from moto.ec2.models.instances import InstanceBackend
from moto.ec2.models.security_groups import SecurityGroupBackend
from moto.ec2.models.subnets import SubnetBackend


class _DifferentNetworks(EC2ClientError):
    def __init__(self, group: str, subnet: str):
        super().__init__("InvalidParameter", f"Security group {group} and subnet {subnet} belong to different networks.")


def _patched():
    """The three moto behaviours above, made EC2's; returns a function that undoes them."""
    original_sg = SecurityGroupBackend.create_security_group
    original_subnet = SubnetBackend.create_subnet
    original_run = InstanceBackend.run_instances

    def create_security_group(self, name, description, vpc_id=None, *args, **kwargs):
        if vpc_id is None and self.get_default_vpc() is None:
            raise VPCIdNotSpecifiedError()
        return original_sg(self, name, description, vpc_id, *args, **kwargs)

    def create_subnet(self, vpc_id, *args, **kwargs):
        subnet = original_subnet(self, vpc_id, *args, **kwargs)
        if not self.get_vpc(vpc_id).is_default:  # the default VPC's own subnets stay default
            subnet.default_for_az = False
            subnet.map_public_ip_on_launch = False
        return subnet

    def run_instances(self, image_id, count, user_data, security_group_names, **kwargs):
        subnet_id = kwargs.get("subnet_id")
        if subnet_id:
            vpc_id = self.get_subnet(subnet_id).vpc_id
            for group_id in kwargs.get("security_group_ids") or []:
                group = self.get_security_group_from_id(group_id)
                if group is not None and group.vpc_id != vpc_id:
                    raise _DifferentNetworks(group_id, subnet_id)
        return original_run(self, image_id, count, user_data, security_group_names, **kwargs)

    SecurityGroupBackend.create_security_group = create_security_group
    SubnetBackend.create_subnet = create_subnet
    InstanceBackend.run_instances = run_instances

    def undo():
        SecurityGroupBackend.create_security_group = original_sg
        SubnetBackend.create_subnet = original_subnet
        InstanceBackend.run_instances = original_run
    return undo


def delete_default_vpc(ec2) -> str | None:
    """What an organisation baseline does: the default VPC's subnets, internet gateway and the VPC go."""
    found = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    if not found:
        return None
    vpc_id = found[0]["VpcId"]
    for subnet in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]:
        ec2.delete_subnet(SubnetId=subnet["SubnetId"])
    for gateway in ec2.describe_internet_gateways(
            Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}])["InternetGateways"]:
        ec2.detach_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"], VpcId=vpc_id)
        ec2.delete_internet_gateway(InternetGatewayId=gateway["InternetGatewayId"])
    ec2.delete_vpc(VpcId=vpc_id)
    return vpc_id


def delete_default_subnet(ec2, zone: str) -> str:
    """A zone added after the default VPC was made: the default VPC has no subnet there."""
    (subnet,) = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]},
                                              {"Name": "availability-zone", "Values": [zone]}])["Subnets"]
    ec2.delete_subnet(SubnetId=subnet["SubnetId"])
    return subnet["SubnetId"]


@contextlib.contextmanager
def ec2_as_ec2_answers():
    """moto with EC2's answers where a VPC is missing or not default (see the module docstring)."""
    undo = _patched()
    try:
        yield
    finally:
        undo()


@contextlib.contextmanager
def no_default_vpc(ec2_for: Callable[[str], object], regions=("us-east-1",)):
    """An account without default VPCs in `regions` (ec2_for(region) -> an EC2 client of the fake)."""
    with ec2_as_ec2_answers():
        for region in regions:
            delete_default_vpc(ec2_for(region))
        yield
