"""The clients the readers use, made on first use and shared across threads, and whether a cloud's
credentials are configured at all (a cheap look at the environment and the usual files, no network).

AWS: a boto3 session (AWS_PROFILE, keys, ~/.aws; AWS_ENDPOINT_URL and AWS_ENDPOINT_URL_<SERVICE> are
boto3's own settings for private endpoints and emulators). The Price List Query API is served only in
us-east-1, eu-central-1 and ap-south-1; DLRUN_AWS_PRICING_REGION picks one (default us-east-1).
GCP: application default credentials and GOOGLE_CLOUD_PROJECT (or the ADC's project);
DLRUN_GCP_API_ENDPOINT points Compute Engine calls elsewhere (Private Service Connect, an emulator),
DLRUN_GCP_BILLING_ENDPOINT the Cloud Billing Catalog calls (default https://cloudbilling.googleapis.com);
both still carry the user's credentials unless DLRUN_GCP_EMULATOR=1 says they are emulators (then anonymous);
DLRUN_GCP_BILLING_API_KEY is an API key for the billing catalog instead of credentials.

Every client is bounded (infra/refresh/bounds.py): `deadline_s` is each source's deadline, from which the
calls' timeouts follow; boto3 clients retry in adaptive mode, google's calls get an explicit Retry and timeout.
"""
from __future__ import annotations

import os
import threading

from infra.refresh.answers import BillingError, ShapeError, UnreadableAnswer
from infra.refresh.bounds import MAX_ATTEMPTS, Deadline, boto_config, bound_client, call_timeouts, gcp_retry
from infra.refresh.logins import aws_login, gcp_emulated, gcp_login, gcp_project

__all__ = ["AwsClients", "GcpClients", "aws_credentials_configured", "gcp_credentials_configured", "gcp_emulated",
           "gcp_project"]

PRICING_REGIONS = ("us-east-1", "eu-central-1", "ap-south-1")


def aws_credentials_configured() -> str | None:
    """None when AWS credentials are configured somewhere boto3 looks without a network call, else why not
    and what fixes it (infra/refresh/logins.py)."""
    return aws_login().problem


def gcp_credentials_configured() -> str | None:
    return gcp_login().problem


_loader = None  # botocore's parsed service models, shared by every session (static data; a client is ~10x faster)
_loader_lock = threading.Lock()


def _boto_session():
    """A new boto3 session (credentials as boto3 finds them now) reusing the service models already loaded."""
    global _loader
    import boto3
    import botocore.session

    core = botocore.session.get_session()
    with _loader_lock:
        if _loader is None:
            _loader = core.get_component("data_loader")
        else:
            core.register_component("data_loader", _loader)
    return boto3.Session(botocore_session=core)


class AwsClients:
    """boto3 clients per (service, region), made once (clients are thread-safe, sessions are not)."""

    def __init__(self, session=None, max_attempts: int = MAX_ATTEMPTS, deadline_s: float = 60.0,
                 deadline_setting: str = "DLRUN_REFRESH_DEADLINE_S"):
        self._session, self._clients, self._lock = session, {}, threading.Lock()
        self.max_attempts = max_attempts  # botocore's adaptive retry mode: tries of one call in all
        self.deadline_s, self.deadline_setting = deadline_s, deadline_setting

    def deadline(self) -> Deadline:
        """A new source's deadline."""
        return Deadline(self.deadline_s, self.deadline_setting)

    def client(self, service: str, region: str):
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                if self._session is None:
                    self._session = _boto_session()
                self._clients[key] = bound_client(self._session.client(
                    service, region_name=region, config=boto_config(self.deadline_s, self.max_attempts)))
            return self._clients[key]

    @property
    def pricing_region(self) -> str:
        return os.environ.get("DLRUN_AWS_PRICING_REGION") or "us-east-1"


class GcpClients:
    """google-cloud-compute REST clients and an HTTP session for the Cloud Billing Catalog API."""

    def __init__(self, project: str | None = None, credentials=None, api_endpoint: str | None = None,
                 billing_endpoint: str | None = None, api_key: str | None = None, deadline_s: float = 60.0,
                 deadline_setting: str = "DLRUN_REFRESH_DEADLINE_S"):
        self.api_endpoint = api_endpoint or os.environ.get("DLRUN_GCP_API_ENDPOINT") or None
        self.billing_endpoint = (billing_endpoint or os.environ.get("DLRUN_GCP_BILLING_ENDPOINT")
                                 or "https://cloudbilling.googleapis.com").rstrip("/")
        self.api_key = api_key or os.environ.get("DLRUN_GCP_BILLING_API_KEY") or None
        self._project, self._credentials = project, credentials
        self._clients: dict[str, object] = {}
        self._lock = threading.Lock()
        self._session = None
        self.deadline_s, self.deadline_setting = deadline_s, deadline_setting

    def deadline(self) -> Deadline:
        return Deadline(self.deadline_s, self.deadline_setting)

    def call(self, deadline: Deadline) -> dict:
        """The retry= and timeout= of one google-cloud-compute call under this source's deadline."""
        deadline.check()
        return {"retry": gcp_retry(deadline), "timeout": call_timeouts(self.deadline_s)[1]}

    def pages(self, client: str, method: str, request: dict, kind: str, deadline: Deadline):
        """Every page of a google-cloud-compute list (`client`.`method`), each call with its own retry= and
        timeout= under the deadline; each page must be a `kind` (GCE names every answer: compute#regionList)
        and no page token may come back (a listing that repeats a page would never end)."""
        what, token, seen = f"compute.{method}", "", set()
        while True:
            pager = getattr(self.compute(client), method)(
                request={**request, **({"page_token": token} if token else {})}, **self.call(deadline))
            page = next(iter(pager.pages))
            if page.kind != kind:
                raise ShapeError(f"{what} answered {page.kind or 'no kind'!r}, not a {kind}")
            yield page
            token = page.next_page_token
            if not token:
                return
            if token in seen:
                raise ShapeError(f"{what} answered the page token {token[:40]!r} a second time (the listing "
                                 "would never end)")
            seen.add(token)

    @property
    def project(self) -> str:
        return self._project or gcp_project() or ""

    def _creds(self):
        if self._credentials is None:
            if gcp_emulated():
                from google.auth.credentials import AnonymousCredentials

                self._credentials = AnonymousCredentials()
            else:
                import google.auth

                self._credentials, default_project = google.auth.default(
                    scopes=["https://www.googleapis.com/auth/cloud-platform"])
                self._project = self._project or default_project
        return self._credentials

    def compute(self, name: str):
        """compute_v1.<name> (RegionsClient, ProjectsClient, AcceleratorTypesClient, MachineTypesClient)."""
        with self._lock:
            if name not in self._clients:
                from google.api_core.client_options import ClientOptions
                from google.cloud import compute_v1

                options = ClientOptions(api_endpoint=self.api_endpoint) if self.api_endpoint else None
                self._clients[name] = getattr(compute_v1, name)(credentials=self._creds(), client_options=options,
                                                               transport="rest")
            return self._clients[name]

    def billing_get(self, path: str, params: dict, deadline: Deadline) -> dict:
        """GET a Cloud Billing Catalog path (API key or ADC), its JSON object out, transient errors retried
        until the deadline; HTTP errors raise BillingError, a body that is not a JSON object UnreadableAnswer."""
        import requests

        with self._lock:
            if self._session is None:
                if self.api_key or gcp_emulated():  # an API key, or the emulators (anonymous)
                    self._session = requests.Session()
                else:
                    from google.auth.transport.requests import AuthorizedSession

                    self._session = AuthorizedSession(self._creds())
        if self.api_key:
            params = {**params, "key": self.api_key}
        url = f"{self.billing_endpoint}/{path.lstrip('/')}"
        session = self._session

        def once() -> dict:
            deadline.check()
            r = session.get(url, params=params, timeout=call_timeouts(self.deadline_s))
            if r.status_code != 200:
                raise BillingError(r.status_code, r.text[:300])
            if not r.content.strip():
                raise UnreadableAnswer("services.skus.list answered HTTP 200 with an empty body")
            try:
                body = r.json()
            except ValueError:
                raise UnreadableAnswer(f"services.skus.list answered HTTP 200 with {len(r.content)} bytes that "
                                       "are not JSON (cut off?)") from None
            if not isinstance(body, dict):
                raise ShapeError(f"services.skus.list answered a JSON {type(body).__name__}, not an object")
            return body

        return gcp_retry(deadline)(once)()
