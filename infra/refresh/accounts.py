"""Who the configured credentials are, and which regions they reach: `dlrun check`'s two calls per cloud,
with the refresh's bounded clients (infra/refresh/clients.py; each read within its deadline, a failure said
as infra/refresh/answers.describe says it: "refused (...)", "timed out: ...").

    AWS  sts:GetCallerIdentity (the account and the caller's ARN; needs no permission) and
         ec2:DescribeRegions (the regions enabled for the account: opt-in regions not enabled are left out)
    GCP  compute.projects.get (the project's name and number) and compute.regions.list (its regions, UP or not)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from infra.refresh.answers import ShapeError, need
from infra.refresh.bounds import current_or_new, read_unit

DEFAULT_AWS_REGION = "us-east-1"  # where STS and DescribeRegions are asked when no region is configured


@dataclass(frozen=True)
class Account:
    identity: str = ""                                  # the account / project, in words
    regions: tuple[str, ...] = ()                       # regions the credentials reach
    down: tuple[str, ...] = ()                          # regions the cloud reports as not up
    error: str = ""                                     # why the calls failed ("" when they did not)
    details: dict = field(default_factory=dict)         # the identity's fields, for --json


def _account(cloud: str, source: str, clients, read) -> Account:
    unit = read_unit(cloud, "account", "", source, clients.deadline(), lambda: [read()])
    if unit.error:
        return Account(error=unit.error)
    return unit.rows[0]


def aws_account(clients, region: str = "") -> Account:
    region = region or DEFAULT_AWS_REGION

    def read() -> Account:
        me = clients.client("sts", region).get_caller_identity()
        account, arn = need(me, "Account", str, "sts:GetCallerIdentity"), str(me.get("Arn") or "")
        listed = need(clients.client("ec2", region).describe_regions(), "Regions", list, "ec2:DescribeRegions")
        names = sorted(str(r.get("RegionName")) for r in listed if r.get("RegionName"))
        if not names:
            raise ShapeError("ec2:DescribeRegions answered no region")
        return Account(f"account {account} ({arn})" if arn else f"account {account}", tuple(names),
                       details={"account": account, "arn": arn, "user_id": me.get("UserId", "")})

    return _account("aws", "sts:GetCallerIdentity + ec2:DescribeRegions", clients, read)


def gcp_account(clients) -> Account:
    def read() -> Account:
        from infra.refresh.gcp_prices import list_regions

        deadline = current_or_new(clients)
        project = clients.compute("ProjectsClient").get(project=clients.project, **clients.call(deadline))
        if project.kind != "compute#project":
            raise ShapeError(f"compute.projects.get answered {project.kind or 'no kind'!r}, not a compute#project")
        regions = list_regions(clients)
        number = str(project.id) if "id" in project else ""
        up = sorted(r.name for r in regions if str(r.status) in ("UP", ""))
        down = sorted(r.name for r in regions if r.name not in up)
        return Account(f"project {project.name}" + (f" (number {number})" if number else ""), tuple(up),
                       tuple(down), details={"project": project.name, "number": number})

    return _account("gcp", "compute.projects.get + compute.regions.list", clients, read)
