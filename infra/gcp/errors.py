"""Compute Engine failures -> the provider errors the runner's failover understands.

GCE reports a failure either as the HTTP error of a call (google.api_core exception) or, for
inserts, inside the finished Operation (`error.errors[].code`, `httpErrorStatusCode`): a zone
stockout is `503 ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS]` in the operation, a quota is
`QUOTA_EXCEEDED` (403) naming the metric. Quota and stockout are classified before the HTTP status,
since both can carry 403/503 codes that would otherwise read as credentials/transient problems.
A zone that does not offer the GPU or machine type rejects the insert with 400 ("The resource
'projects/P/zones/Z/acceleratorTypes/T' was not found", e.g. hashicorp/terraform-provider-google#5860;
"Machine type with name 'M' does not exist in zone 'Z'"): like a stockout, that is the next zone's turn.

Quotas are scoped as GCE scopes them (cloud.google.com/compute/resource-usage, "Regional quotas" and
"GPU quota"; the message names the metric: "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region
us-central1."): a per-GPU-type regional metric (NVIDIA_T4_GPUS) blocks that GPU type in that region,
its PREEMPTIBLE_ twin the spot market only; GPUS_ALL_REGIONS blocks GPU offers everywhere; CPUS (N1 and
E2 draw on it) and a series' own CPU quota (N2_CPUS, C3_CPUS, ...) block those series in the region;
PREEMPTIBLE_CPUS spot there. Where a region has no preemptible quota, a spot VM draws on the standard one,
so a standard metric named by a *spot* insert blocks both markets. Any other regional metric
(IN_USE_ADDRESSES, SSD_TOTAL_GB, INSTANCES, ...) blocks the region; CPUS_ALL_REGIONS the whole cloud.

Rate limits are not credentials: `rateLimitExceeded` / `userRateLimitExceeded` (403) and HTTP 429
(cloud.google.com/compute/api-quotas: "HTTP 403 ... rateLimitExceeded" per-minute API quotas) are
retried with backoff by the provider (retry.py) and, when they outlast it, fail this offer only.
An insert naming a node service account IAM has not propagated to Compute Engine yet answers 400 on
`resource.serviceAccounts[0].email` ("... does not exist" / "The user does not have access to service
account ...": the provider retries it for a bounded time, then it is the permission it says it is).
An organisation policy that enforces OS Login (constraints/compute.requireOsLogin) refuses the instance
metadata `enable-oslogin=FALSE` dlrun sets: that ends every GCP attempt at once (CredentialsError).
"""
from __future__ import annotations

import re

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc

from infra.base import CapacityError, CredentialsError, ProviderError, ProvisionError, QuotaError, QuotaScope
from infra.catalog import canonical_gpu

CREDENTIALS_HOWTO = ("run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS "
                     "to a service-account key file")
CAPACITY_MARKERS = ("ZONE_RESOURCE_POOL_EXHAUSTED", "does not have enough resources", "stockout",
                    "RESOURCE_POOL_EXHAUSTED")
QUOTA_MARKERS = ("QUOTA_EXCEEDED", "quotaExceeded", "Quota '")
GLOBAL_QUOTA_MARKERS = ("GPUS_ALL_REGIONS", "globally")
NOT_IN_ZONE = re.compile(r"does not exist in zone|zones/[^/]+/(acceleratorTypes|machineTypes)/[^' ]+' was not found")
QUOTA_METRIC = re.compile(r"Quota '([A-Z0-9_]+)' exceeded")
RATE_LIMIT_REASONS = ("rateLimitExceeded", "userRateLimitExceeded", "RATE_LIMIT_EXCEEDED")
ACCOUNT_FIELD = re.compile(r"resource\.serviceAccounts\[\d+\]\.email")
OS_LOGIN_POLICY = "constraints/compute.requireOsLogin"
OS_LOGIN_HOWTO = ("dlrun reaches its VMs over SSH with a per-cluster key in the instance's `ssh-keys` metadata, "
                  "which OS Login ignores; ask the organisation's admin to exempt this project from "
                  f"{OS_LOGIN_POLICY} (an org-policy exception on the project), use another GCP project, or "
                  "leave gcp out of `resources.clouds`")
# the series whose vCPUs count against the regional CPUS quota; others have their own (N2_CPUS, ...)
CPUS_SERIES = ("n1", "e2", "f1", "g1")
# GPU quota metric names whose GPU name is not the metric's middle part
GPU_METRIC_NAMES = {"A100_80GB": "A100-80GB", "H100_MEGA": "H100-MEGA", "V100_32GB": "V100-32GB"}


def is_rate_limit(status: int | None, codes: list[str], message: str = "") -> bool:
    return status == 429 or any(c in RATE_LIMIT_REASONS for c in codes) or "Rate Limit Exceeded" in message


def is_account_not_ready(status: int | None, message: str) -> bool:
    """The insert's answer while a just-made service account has not reached Compute Engine."""
    return status == 400 and bool(ACCOUNT_FIELD.search(message or ""))


def quota_scope(metric: str, *, region: str, spot: bool | None) -> QuotaScope | None:
    """What one exhausted GCE quota metric rules out (None: a metric this does not know)."""
    preemptible = metric.startswith("PREEMPTIBLE_")
    name = metric[len("PREEMPTIBLE_"):] if preemptible else metric
    # a standard metric named by a spot insert: this region has no preemptible quota, both markets draw on
    # it; a preemptible one named by an on-demand insert: a GPU VM deleted after a run time of at most 7 days
    # (dlrun's maxRunDuration) may draw on preemptible quota (cloud.google.com/compute/docs/instances/
    # limit-vm-runtime, "GPU VMs and preemptible allocation quotas"): both markets, the failed one included
    if preemptible:
        market = "" if spot is False else "spot"
    else:
        market = "" if spot else "on-demand"
    if name == "GPUS_ALL_REGIONS":
        return QuotaScope(cloud="gcp", gpu_only=True, quota=metric)
    if name == "CPUS_ALL_REGIONS":
        return QuotaScope(cloud="gcp", quota=metric)
    if m := re.fullmatch(r"NVIDIA_([A-Z0-9_]+)_GPUS", name):
        gpu = canonical_gpu(GPU_METRIC_NAMES.get(m.group(1), m.group(1).replace("_", "-")))
        if not gpu:
            return QuotaScope(cloud="gcp", region=region, market=market, gpu_only=True, quota=metric)
        return QuotaScope(cloud="gcp", region=region, market=market, accelerator=gpu, quota=metric)
    if name == "CPUS":
        return QuotaScope(cloud="gcp", region=region, market=market, families=CPUS_SERIES, quota=metric)
    if m := re.fullmatch(r"([A-Z][A-Z0-9]*)_CPUS", name):
        return QuotaScope(cloud="gcp", region=region, market=market, families=(m.group(1).lower(),), quota=metric)
    if region:  # IN_USE_ADDRESSES, SSD_TOTAL_GB, INSTANCES, ...: every offer of the region
        return QuotaScope(cloud="gcp", region=region, quota=metric)
    return None


def classify(status: int | None, codes: list[str], message: str, *, region: str = "",
             zone: str = "", what: str = "", spot: bool | None = None) -> ProviderError:
    """One error from an HTTP status, GCE's error codes/reasons and message. `spot`: the market of the
    request that failed, when known (a standard quota named by a spot insert blocks both markets)."""
    text = " ".join([*codes, message])
    where = dict(cloud="gcp", region=region, zone=zone)
    subject = f"{what} in {zone or region}" if what else (zone or region or "GCP")
    if OS_LOGIN_POLICY in text:
        return CredentialsError(f"GCP project refuses VMs without OS Login (organisation policy {OS_LOGIN_POLICY}): "
                                f"{message}; {OS_LOGIN_HOWTO}", **where)
    if is_rate_limit(status, codes, message):
        return ProvisionError(f"GCP rate limit still exceeded for {subject} after retries: {message}", **where)
    if is_account_not_ready(status, message):
        return CredentialsError(f"GCP refused the node service account for {subject}: {message} (dlrun needs "
                                "roles/iam.serviceAccountUser on the project, or on its dlrun-* node accounts, "
                                "to run VMs as them)", **where)
    if NOT_IN_ZONE.search(text):
        return CapacityError(f"GCP does not offer {subject}: {message}", **where)
    if any(m in text for m in CAPACITY_MARKERS):
        return CapacityError(f"GCP has no capacity for {subject}: {message}", **where)
    if any(m in text for m in QUOTA_MARKERS):
        is_global = any(m in text for m in GLOBAL_QUOTA_MARKERS)
        metric = QUOTA_METRIC.search(message)
        scope = quota_scope(metric.group(1), region=region, spot=spot) if metric else None
        return QuotaError(f"GCP quota exhausted for {subject}: {message} (request more at "
                          "https://console.cloud.google.com/iam-admin/quotas)",
                          global_quota=is_global, quota=scope, **where)
    if status in (401, 403):
        return CredentialsError(f"GCP refused the request ({status}: {message}); {CREDENTIALS_HOWTO}, "
                                "and check the account has the Compute Admin role on the project", **where)
    return ProvisionError(f"GCP request failed for {subject}: {status or ''} {message}".strip(), **where)


def api_codes(e: gexc.GoogleAPICallError) -> list[str]:
    """The reasons/codes of an API error (`errors[].reason` in GCE's JSON error body)."""
    codes = [str(x.get("reason", "")) if isinstance(x, dict) else str(getattr(x, "code", x)) for x in (e.errors or [])]
    reason = getattr(e, "reason", None)
    return codes + ([reason] if reason else [])


def from_exception(e: BaseException, **kw) -> ProviderError:
    if isinstance(e, ProviderError):
        return e
    if isinstance(e, (auth_exc.DefaultCredentialsError, auth_exc.RefreshError)):
        return CredentialsError(f"GCP credentials unusable ({e}); {CREDENTIALS_HOWTO}",
                                cloud="gcp", region=kw.get("region", ""))
    if isinstance(e, gexc.GoogleAPICallError):
        return classify(e.code, api_codes(e), e.message or str(e), **kw)
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
