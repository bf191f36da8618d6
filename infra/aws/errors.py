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
QUOTA_CODES = frozenset({"InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"})
CREDENTIAL_CODES = frozenset({
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ExpiredToken", "RequestExpired", "OptInRequired", "Blocked", "AccessDenied",
    "InvalidAccessKeyId",  # S3's word for an unknown key (docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html)
})
# botocore already retried these with backoff; reaching us means the retries ran out
THROTTLE_CODES = frozenset({"RequestLimitExceeded", "Throttling", "ThrottlingException"})


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
            return QuotaError(f"quota exhausted for {subject}: {code}: {message}", **where)
        if code in CREDENTIAL_CODES:
            return CredentialsError(f"{CREDENTIALS_HOWTO} ({code})", **where)
        if code in THROTTLE_CODES:
            return ProvisionError(f"EC2 kept throttling requests in {place} ({code}) after retries", **where)
        return ProvisionError(f"EC2 error in {place}: {code}: {message}", **where)
    if isinstance(err, BotoCoreError):
        return ProvisionError(f"AWS request failed in {place}: {err}", **where)
    return ProvisionError(f"{type(err).__name__}: {err}", **where)
