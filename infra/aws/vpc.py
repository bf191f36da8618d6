"""Where a cluster's instances live: the VPC its security group belongs to, and a subnet per zone.

EC2 places an instance launched without a subnet in the default VPC's default subnet of its zone. Accounts
whose organisation baseline deleted the default VPC have neither, and EC2 then refuses:
`CreateSecurityGroup` without VpcId answers `VPCIdNotSpecified` ("No default VPC for this user"),
`RunInstances` without SubnetId answers `VPCIdNotSpecified` too, or `MissingInput` ("No subnets found for
the default VPC") when the VPC is there but its subnets are not, and an availability zone added after the
default VPC was made has no default subnet ("No default subnet for availability zone"; default subnets are
made per zone only when the VPC is: docs.aws.amazon.com/vpc/latest/userguide/default-vpc.html). So dlrun
picks the network itself, in this order:

1. the subnet the user names for the region in $DLRUN_HOME/config.yaml (`aws: {subnets: {REGION: subnet-ID}}`):
   its VPC, and its zone only (a subnet lives in one zone). For networks dlrun must not touch: a corporate
   VPC, a private subnet reached through a bastion ($DLRUN_SSH_CONFIG).
2. the region's default VPC, with its default subnet in each zone; a zone without one (or without free
   addresses) is skipped: the launch moves to the next zone.
3. dlrun's own VPC in the region, made on the first launch there and kept (like GCP's `dlrun` network):
   10.213.0.0/16, an internet gateway, a 0.0.0.0/0 route in its main route table, and a public /20 subnet
   (MapPublicIpOnLaunch) per zone, made when a launch first needs that zone. Everything carries dlrun's tags;
   `dlrun down --orphans` lists it and leaves it (it costs nothing: VPCs, subnets, route tables and an
   unused internet gateway are free; docs.aws.amazon.com/vpc/latest/userguide/vpc-pricing.html).

Each step is idempotent: a launch killed half-way through making the VPC leaves tagged pieces that the
next launch finds and completes. Two first launches in the same region at the same moment may each make
a VPC; both are tagged and listed, and every later launch uses the one with the lowest id.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from botocore.exceptions import ClientError

from infra.aws.errors import error_code
from infra.base import TAG_OWNER, ProvisionError, QuotaError

TAG_NETWORK = "dlrun-network"      # on dlrun's kept VPC and its parts; value: NETWORK_NAME
NETWORK_NAME = "dlrun"
VPC_CIDR = "10.213.0.0/16"         # a private range of its own (nothing peers with it)
SUBNET_PREFIX = 20                 # 4091 addresses per zone
CONFIG_KEY = "aws.subnets"


@dataclass
class Network:
    """The VPC chosen for a region, and the subnet known for each zone so far."""

    region: str
    vpc_id: str
    source: str                    # "config" | "default" | "dlrun"
    subnets: dict[str, str] = field(default_factory=dict)  # zone -> subnet id
    fixed_zone: str = ""           # a user's subnet: the only zone to launch in
    why_none: dict[str, str] = field(default_factory=dict)  # zone -> why no subnet is usable there


def configured_subnets() -> dict[str, str]:
    """config.yaml's `aws.subnets` (region -> subnet id), read where infra needs it.

    The orchestrator validates the whole file (orchestrator/config.py, before anything is planned: a
    malformed file is a usage error there, exit 2); this reader only takes the one key infra uses, and
    reads a file it cannot parse as empty rather than failing a teardown over it."""
    import yaml

    from infra.paths import dlrun_home

    path = dlrun_home() / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text()) if path.exists() else None
    except (OSError, yaml.YAMLError):
        return {}
    aws = data.get("aws") if isinstance(data, dict) else None
    subnets = aws.get("subnets") if isinstance(aws, dict) else None
    if not isinstance(subnets, dict):
        return {}
    return {str(k): v for k, v in subnets.items() if isinstance(v, str)}


# EC2 is eventually consistent: a resource just made may be "not found" by the next call for a few seconds
# (docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html); such calls are retried, bounded
NOT_YET = frozenset({"InvalidVpcID.NotFound", "InvalidInternetGatewayID.NotFound", "InvalidSubnetID.NotFound",
                     "InvalidRouteTableID.NotFound", "InvalidGatewayID.NotFound"})
NOT_YET_WAIT_S = 60.0


def _settled(call, *args, sleep=None, **kwargs):
    """call(*args, **kwargs), retried with a growing pause while EC2 does not see a new resource yet."""
    import time

    sleep = sleep or time.sleep
    deadline, pause = time.monotonic() + NOT_YET_WAIT_S, 0.5
    while True:
        try:
            return call(*args, **kwargs)
        except ClientError as e:
            if error_code(e) not in NOT_YET or time.monotonic() + pause > deadline:
                raise
        sleep(pause)
        pause = min(pause * 2, 8.0)


def _tags(owner: str, name: str) -> dict[str, str]:
    return {TAG_NETWORK: NETWORK_NAME, TAG_OWNER: owner, "Name": name}


def _spec(kind: str, tags: dict[str, str]) -> list[dict]:
    return [{"ResourceType": kind, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]


def _usable(subnet: dict, count: int) -> str:
    """"" when instances can go there, else why not."""
    if subnet.get("State", "available") != "available":
        return f"subnet {subnet['SubnetId']} is {subnet.get('State')}"
    if int(subnet.get("AvailableIpAddressCount", count)) < count:
        return f"subnet {subnet['SubnetId']} has {subnet.get('AvailableIpAddressCount')} free addresses"
    return ""


# ------------------------------------------------------------------ choosing the network
def choose(ec2, region: str, *, user_subnet: str = "", owner: str = "") -> Network:
    """The network for launches in `region`: the user's subnet, else the default VPC when it has default
    subnets, else dlrun's VPC (made now if missing)."""
    if user_subnet:
        return _configured(ec2, region, user_subnet)
    default = ec2.describe_vpcs(Filters=[{"Name": "isDefault", "Values": ["true"]}])["Vpcs"]
    if default:
        vpc_id = default[0]["VpcId"]
        subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]},
                                                {"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
        if subnets:
            return Network(region, vpc_id, "default",
                           subnets={s["AvailabilityZone"]: s["SubnetId"] for s in subnets})
    return Network(region, ensure_dlrun_vpc(ec2, region, owner), "dlrun")


def _configured(ec2, region: str, subnet_id: str) -> Network:
    where = f"$DLRUN_HOME/config.yaml {CONFIG_KEY}.{region}"
    try:
        (subnet,) = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
    except ClientError as e:
        if error_code(e) not in ("InvalidSubnetID.NotFound", "InvalidSubnetID.Malformed"):
            raise
        err = ProvisionError(f"{where}: {subnet_id} is not a subnet of {region} ({error_code(e)}); name one "
                             f"of that region's subnets, or remove the entry to use the default VPC or "
                             f"dlrun's own", cloud="aws", region=region)
        err.scope = "region"  # every offer of the region would fail the same way
        raise err from None
    return Network(region, subnet["VpcId"], "config", subnets={subnet["AvailabilityZone"]: subnet_id},
                   fixed_zone=subnet["AvailabilityZone"])


def subnet_in(ec2, network: Network, zone: str, *, count: int = 1, owner: str = "") -> str | None:
    """A usable subnet of the network in `zone`, or None (network.why_none[zone] says why): the launch then
    moves to the next zone. dlrun's VPC gets its subnet there now."""
    if network.source == "dlrun":
        try:
            subnet = _dlrun_subnet(ec2, network, zone, owner)
        except ClientError as e:
            # a zone that takes no new subnets (EC2 names the zones that do in the message)
            if error_code(e) != "InvalidParameterValue" or "availabilityZone" not in str(e):
                raise
            network.why_none[zone] = f"no subnet can be made in {zone}: {e.response['Error'].get('Message', '')}"
            return None
        network.subnets[zone] = subnet["SubnetId"]
        why = _usable(subnet, count)
    elif zone not in network.subnets:
        why = (f"the default VPC {network.vpc_id} has no default subnet in {zone}" if network.source == "default"
               else f"the subnet in {CONFIG_KEY}.{network.region} is in {network.fixed_zone}, not {zone}")
    else:
        (subnet,) = ec2.describe_subnets(SubnetIds=[network.subnets[zone]])["Subnets"]
        why = _usable(subnet, count)
    if why:
        network.why_none[zone] = why
        return None
    return network.subnets[zone]


# ------------------------------------------------------------------ dlrun's own VPC
def find_dlrun_vpcs(ec2) -> list[dict]:
    vpcs = ec2.describe_vpcs(Filters=[{"Name": f"tag:{TAG_NETWORK}", "Values": [NETWORK_NAME]}])["Vpcs"]
    return sorted(vpcs, key=lambda v: v["VpcId"])


def ensure_dlrun_vpc(ec2, region: str, owner: str = "") -> str:
    """dlrun's VPC in this region with its internet gateway and default route (made or completed now)."""
    try:
        found = find_dlrun_vpcs(ec2)
        if found:
            vpc_id = found[0]["VpcId"]
        else:
            vpc_id = ec2.create_vpc(CidrBlock=VPC_CIDR,
                                    TagSpecifications=_spec("vpc", _tags(owner, NETWORK_NAME)))["Vpc"]["VpcId"]
        gateway = _ensure_gateway(ec2, vpc_id, owner)
        _ensure_route(ec2, vpc_id, gateway)
        return vpc_id
    except ClientError as e:
        if error_code(e) in ("VpcLimitExceeded", "InternetGatewayLimitExceeded"):
            what = "VPCs per Region" if error_code(e) == "VpcLimitExceeded" else "Internet gateways per Region"
            raise QuotaError(f"{region} has no default VPC and dlrun's own needs one more, but the quota "
                             f"\"{what}\" is full there ({error_code(e)}; default 5): raise it in the Service "
                             f"Quotas console (service \"Amazon Virtual Private Cloud (Amazon VPC)\"), delete an "
                             f"unused one, or name a subnet in $DLRUN_HOME/config.yaml {CONFIG_KEY}.{region}",
                             cloud="aws", region=region) from None
        if error_code(e) in ("UnauthorizedOperation", "AccessDenied"):
            err = ProvisionError(
                f"{region} has no default VPC and this AWS login may not make dlrun's own "
                f"({error_code(e)}): allow ec2:CreateVpc, CreateSubnet, CreateInternetGateway, "
                f"AttachInternetGateway, CreateRoute, ModifySubnetAttribute and CreateTags, or name a subnet "
                f"in $DLRUN_HOME/config.yaml {CONFIG_KEY}.{region}", cloud="aws", region=region)
            err.scope = "region"
            raise err from None
        raise


def _ensure_gateway(ec2, vpc_id: str, owner: str) -> str:
    attached = ec2.describe_internet_gateways(
        Filters=[{"Name": "attachment.vpc-id", "Values": [vpc_id]}])["InternetGateways"]
    if attached:
        return attached[0]["InternetGatewayId"]
    gateway = ec2.create_internet_gateway(
        TagSpecifications=_spec("internet-gateway", _tags(owner, NETWORK_NAME)))["InternetGateway"]["InternetGatewayId"]
    _settled(ec2.attach_internet_gateway, InternetGatewayId=gateway, VpcId=vpc_id)
    return gateway


def _ensure_route(ec2, vpc_id: str, gateway: str) -> None:
    """0.0.0.0/0 through the gateway in the VPC's main route table (subnets without a table of their own
    use it): what makes the subnets public."""
    def main_table():
        found = ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc_id]},
                                                   {"Name": "association.main", "Values": ["true"]}])["RouteTables"]
        if not found:  # a VPC just made: its main table is not listed yet
            raise ClientError({"Error": {"Code": "InvalidRouteTableID.NotFound",
                                         "Message": f"no main route table listed for {vpc_id} yet"}},
                              "DescribeRouteTables")
        return found[0]
    table = _settled(main_table)
    route = next((r for r in table.get("Routes", []) if r.get("DestinationCidrBlock") == "0.0.0.0/0"), None)
    if route is None:
        _settled(ec2.create_route, RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0",
                 GatewayId=gateway)
    elif route.get("GatewayId") != gateway or route.get("State") == "blackhole":
        ec2.replace_route(RouteTableId=table["RouteTableId"], DestinationCidrBlock="0.0.0.0/0", GatewayId=gateway)


def _dlrun_subnet(ec2, network: Network, zone: str, owner: str) -> dict:
    mine = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [network.vpc_id]}])["Subnets"]
    here = sorted((s for s in mine if s["AvailabilityZone"] == zone), key=lambda s: s["SubnetId"])
    if here:
        subnet = here[0]
    else:
        taken = [ipaddress.ip_network(s["CidrBlock"]) for s in mine]
        free = next((c for c in ipaddress.ip_network(VPC_CIDR).subnets(new_prefix=SUBNET_PREFIX)
                     if not any(c.overlaps(t) for t in taken)), None)
        if free is None:
            raise ProvisionError(f"dlrun's VPC {network.vpc_id} in {network.region} has no free /{SUBNET_PREFIX} "
                                 f"for a subnet in {zone}", cloud="aws", region=network.region, zone=zone)
        subnet = _settled(ec2.create_subnet, VpcId=network.vpc_id, CidrBlock=str(free), AvailabilityZone=zone,
                          TagSpecifications=_spec("subnet", _tags(owner, f"{NETWORK_NAME}-{zone}")))["Subnet"]
    if not subnet.get("MapPublicIpOnLaunch"):  # a new subnet maps no public IPs (CreateSubnet's default)
        _settled(ec2.modify_subnet_attribute, SubnetId=subnet["SubnetId"], MapPublicIpOnLaunch={"Value": True})
    return subnet


def describe_kept(ec2, region: str) -> list[str]:
    """One line per dlrun VPC in the region, for `dlrun down --orphans` (which keeps them)."""
    lines = []
    for vpc in find_dlrun_vpcs(ec2):
        subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["Subnets"]
        lines.append(f"aws network {NETWORK_NAME} ({vpc['VpcId']}, {len(subnets)} subnet(s)) in {region}: kept for "
                     f"later launches, costs nothing; remove it with the VPC console's \"Delete VPC\" when no "
                     f"longer wanted")
    return lines
