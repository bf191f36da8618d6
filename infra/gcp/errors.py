"""Compute Engine failures -> the provider errors the runner's failover understands.

GCE reports a failure either as the HTTP error of a call (google.api_core exception) or, for
inserts, inside the finished Operation (`error.errors[].code`, `httpErrorStatusCode`): a zone
stockout is `503 ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]` in the operation, a quota is
`QUOTA_EXCEEDED` (403) naming the metric. Quota and stockout are classified before the HTTP status,
since both can carry 403/503 codes that would otherwise read as credentials/transient problems.
A zone that does not offer the GPU or machine type rejects the insert with 400 ("The resource
'projects/P/zones/Z/acceleratorTypes/T' was not found", e.g. hashicorp/terraform-provider-google#5860;
"Machine type with name 'M' does not exist in zone 'Z'"): like a stockout, that is the next zone's turn.
"""
from __future__ import annotations

import re

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from infra.base import CapacityError, CredentialsError, ProviderError, ProvisionError, QuotaError

CREDENTIALS_HOWTO = ("run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS "
                     "to a service-account key file")
CAPACITY_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "does not have enough resources", "stockout",
                    "RESOURCE_POOL_EXHAUSTED")
QUOTA_MARKERS = ("QUOTA_EXCEEDED", "quotaExceeded", "Quota '")
GLOBAL_QUOTA_MARKERS = ("GPUS_ALL_REGIONS", "globally")
NOT_IN_ZONE = re.compile(r"does not exist in zone|zones/[^/]+/(acceleratorTypes|machineTypes)/[^' ]+' was not found")


def classify(status: int | None, codes: list[str], message: str, *, region: str = "",
             zone: str = "", what: str = "") -> ProviderError:
    """One error from an HTTP status, GCE's error codes/reasons and message."""
    text = " ".join([*codes, message])
    where = dict(cloud="gcp", region=region, zone=zone)
    subject = f"{what} in {zone or region}" if what else (zone or region or "GCP")
    if NOT_IN_ZONE.search(text):
        return CapacityError(f"GCP does not offer {subject}: {message}", **where)
    if any(m in text for m in CAPACITY_MARKERS):
        return CapacityError(f"GCP has no capacity for {subject}: {message}", **where)
    if any(m in text for m in QUOTA_MARKERS):
        is_global = any(m in text for m in GLOBAL_QUOTA_MARKERS)
        return QuotaError(f"GCP quota exhausted for {subject}: {message} (request more at "
                          "https://console.cloud.google.com/iam-admin/quotas)",
                          global_quota=is_global, **where)
    if status in (401, 403):
        return CredentialsError(f"GCP refused the request ({status}: {message}); {CREDENTIALS_HOWTO}, "
                                "and check the account has the Compute Admin role on the project", **where)
    return ProvisionError(f"GCP request failed for {subject}: {status or ''} {message}".strip(), **where)


def from_exception(e: BaseException, **kw) -> ProviderError:
    if isinstance(e, ProviderError):
        return e
    if isinstance(e, (auth_exc.DefaultCredentialsError, auth_exc.RefreshError)):
        return CredentialsError(f"GCP credentials unusable ({e}); {CREDENTIALS_HOWTO}",
                                cloud="gcp", region=kw.get("region", ""))
    if isinstance(e, gexc.GoogleAPICallError):
        codes = [str(x.get("reason", "")) if isinstance(x, dict) else str(getattr(x, "code", x))
                 for x in (e.errors or [])]
        return classify(e.code, codes, e.message or str(e), **kw)
    return ProvisionError(f"GCP request failed: {e}", cloud="gcp", region=kw.get("region", ""),
                          zone=kw.get("zone", ""))


def from_operation(op, **kw) -> ProviderError | None:
    """The error a finished operation carries, or None when it succeeded."""
    errors = list(op.error.errors) if op.error else []
    if not errors and not op.http_error_status_code:
        return None
    codes = [e.code for e in errors]
    message = "; ".join(e.message for e in errors if e.message) or op.http_error_message or "operation failed"
    return classify(op.http_error_status_code or None, codes, message, **kw)
