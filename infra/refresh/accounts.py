"""Who the configured credentials are, and which regions they reach: `dlrun check`'s two calls per cloud
(the second may fail alone: the credentials are then usable, their regions not known),
with the refresh's bounded clients (infra/refresh/clients.py; each read within its deadline, a failure said
as infra/refresh/answers.describe says it: "refused (...)", "timed out: ...").

    AWS  sts:GetCallerIdentity (the account and the caller's ARN; needs no permission) and
         ec2:DescribeRegions (the regions enabled for the account: opt-in regions not enabled are left out)
    GCP  compute.projects.get (the project's name and number) and compute.regions.list (its regions, UP or not)
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from infra.refresh.answers import ShapeError, need
from infra.refresh.bounds import current_or_new, read_unit

DEFAULT_AWS_REGION = "us-east-1"  # where STS and DescribeRegions are asked when no region is configured


@dataclass(frozen=True)
class Account:
    identity: str = ""                                  # the account / project, in words
    regions: tuple[str, ...] = ()                       # regions the credentials reach
    down: tuple[str, ...] = ()                          # regions the cloud reports as not up
    error: str = ""                                     # why the identity call failed ("" when it did not)
    regions_error: str = ""                             # why the regions could not be listed
    details: dict = field(default_factory=dict)         # the identity's fields, for --json


def _account(cloud: str, source: str, clients, read) -> Account:
    unit = read_unit(cloud, "account", "", source, clients.deadline(), lambda: [read()])
    if unit.error:
        return Account(error=unit.error)
    return unit.rows[0]


def _with_regions(cloud: str, source: str, clients, account: Account, read) -> Account:
    """The account with the regions `read` lists, or with why they could not be listed (it stays usable:
    a role may lack the permission to list regions and still launch in them)."""
    if account.error:
        return account
    unit = read_unit(cloud, "regions", "", source, clients.deadline(), lambda: [read()])
    if unit.error:
        return replace(account, regions_error=unit.error)
    up, down = unit.rows[0]
    return replace(account, regions=tuple(up), down=tuple(down))


def aws_account(clients, region: str = "") -> Account:
    region = region or DEFAULT_AWS_REGION

    def identity() -> Account:
        me = clients.client("sts", region).get_caller_identity()
        account, arn = need(me, "Account", str, "sts:GetCallerIdentity"), str(me.get("Arn") or "")
        return Account(f"account {account} ({arn})" if arn else f"account {account}",
                       details={"account": account, "arn": arn, "user_id": me.get("UserId", "")})

    def regions() -> tuple[list[str], list[str]]:
        listed = need(clients.client("ec2", region).describe_regions(), "Regions", list, "ec2:DescribeRegions")
        names = sorted(str(r.get("RegionName")) for r in listed if r.get("RegionName"))
        if not names:
            raise ShapeError("ec2:DescribeRegions answered no region")
        return names, []

    account = _account("aws", "sts:GetCallerIdentity", clients, identity)
    return _with_regions("aws", "ec2:DescribeRegions", clients, account, regions)


def gcp_account(clients) -> Account:
    def identity() -> Account:
        deadline = current_or_new(clients)
        project = clients.compute("ProjectsClient").get(project=clients.project, **clients.call(deadline))
        if project.kind != "compute#project":
            raise ShapeError(f"compute.projects.get answered {project.kind or 'no kind'!r}, not a compute#project")
        number = str(project.id) if "id" in project else ""
        return Account(f"project {project.name}" + (f" (number {number})" if number else ""),
                       details={"project": project.name, "number": number})

    def regions() -> tuple[list[str], list[str]]:
        from infra.refresh.gcp_prices import list_regions

        listed = list_regions(clients)
        up = sorted(r.name for r in listed if str(r.status) in ("UP", ""))
        return up, sorted(r.name for r in listed if r.name not in up)

    account = _account("gcp", "compute.projects.get", clients, identity)
    return _with_regions("gcp", "compute.regions.list", clients, account, regions)
