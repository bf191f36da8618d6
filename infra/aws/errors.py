"""Map EC2/botocore failures onto infra.base's errors, so the runner's failover can act on them."""
from __future__ import annotations

from botocore.exceptions import (BotoCoreError, ClientError, NoCredentialsError, NoRegionError,
                                 PartialCredentialsError)

from infra.base import CapacityError, CredentialsError, ProviderError, ProvisionError, QuotaError

CREDENTIALS_HOWTO = ("AWS credentials missing or refused: run `aws configure` or set "
                     "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and a region)")

# "Unsupported": the instance type is not offered in this zone, so another zone may have it
CAPACITY_CODES = frozenset({
    "InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity",
    "SpotMaxPriceTooLow", "capacity-not-available", "Unsupported", "InsufficientReservedInstanceCapacity",
    "capacity-oversubscribed", "price-too-low",
})
QUOTA_CODES = frozenset({"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded",
                         # dlrun's own VPC: 5 VPCs / 5 internet gateways per region by default
                         # (docs.aws.amazon.com/vpc/latest/userguide/amazon-vpc-limits.html)
                         "VpcLimitExceeded", "InternetGatewayLimitExceeded", "SubnetLimitExceeded"})
# StateReason codes of an instance that ended while starting for want of capacity, not for a fault of the
# request: the next zone may have it (docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StateReason.html)
START_CAPACITY_REASONS = frozenset({"Server.InsufficientInstanceCapacity", "Server.SpotInstanceTermination",
                                    "Server.SpotInstanceShutdown"})
CREDENTIAL_CODES = frozenset({
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ExpiredToken", "RequestExpired", "OptInRequired", "Blocked", "AccessDenied",
    "InvalidAccessKeyId",  # S3's word for an unknown key (docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)
})
# botocore already retried these with backoff; reaching us means the retries ran out
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})


def quota_error(err: ClientError, *, instance_type: str, region: str, spot: bool, vcpus_needed: int = 0,
                zone: str = "") -> QuotaError:
    """A vCPU quota refusal of RunInstances, scoped to the bucket it names (infra/aws/quotas.py): it blocks
    the offers drawing on that quota in this region and market, nothing else."""
    from infra.aws import quotas

    code = error_code(err)
    market = "spot" if spot else "on-demand"
    return QuotaError(f"AWS {market} vCPU quota full for {instance_type} in {region} ({code}): "
                      f"{quotas.how_to_raise(instance_type, region, spot, vcpus_needed)}",
                      quota=quotas.scope_for(instance_type, region, spot), cloud="aws", region=region, zone=zone)


def error_code(err: BaseException) -> str:
    if isinstance(err, ClientError):
        return err.response.get("Error", {}).get("Code", "") or ""
    return ""


def to_provider_error(err: BaseException, *, region: str = "", zone: str = "",
                      what: str = "") -> ProviderError:
    """The infra.base error for a botocore failure (ProviderErrors pass through unchanged)."""
    if isinstance(err, ProviderError):
        return err
    where = {"cloud": "aws", "region": region, "zone": zone}
    place = zone or region or "aws"
    if isinstance(err, (NoCredentialsError, PartialCredentialsError)):
        return CredentialsError(CREDENTIALS_HOWTO, **where)
    if isinstance(err, NoRegionError):
        return CredentialsError("no AWS region configured: run `aws configure` or set "
                                "AWS_DEFAULT_REGION", **where)
    if isinstance(err, ClientError):
        code = error_code(err)
        message = err.response.get("Error", {}).get("Message", "") or code
        subject = f"{what} in {place}" if what else place
        if code in CAPACITY_CODES:
            return CapacityError(f"no capacity for {subject}: {code}: {message}", **where)
        if code in QUOTA_CODES:
            return QuotaError(f"quota exhausted for {subject}: {code}: {message}", cloud="aws", region=region,
                              zone=zone)
        if code in CREDENTIAL_CODES:
            return CredentialsError(f"{CREDENTIALS_HOWTO} ({code})", **where)
        if code in THROTTLE_CODES:
            return ProvisionError(f"EC2 kept throttling requests in {place} ({code}) after retries", **where)
        return ProvisionError(f"EC2 error in {place}: {code}: {message}", **where)
    if isinstance(err, BotoCoreError):
        return ProvisionError(f"AWS request failed in {place}: {err}", **where)
    return ProvisionError(f"{type(err).__name__}: {err}", **where)
