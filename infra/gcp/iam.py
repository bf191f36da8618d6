"""The IAM service-account calls dlrun makes, over REST (no IAM client library is installed).

v1 projects.serviceAccounts create/get/list/delete (cloud.google.com/iam/docs/reference/rest/v1/
projects.serviceAccounts); `endpoint` replaces https://iam.googleapis.com for an emulator.
"""
from __future__ import annotations

import time
from urllib.parse import quote

DEFAULT_ENDPOINT = "https://iam.googleapis.com"
# A new account is not visible everywhere at once (cloud.google.com/iam/docs/overview#consistency); like
# Terraform's google_service_account (GoogleCloudPlatform/magic-modules#14447) dlrun reads it back until it is.
VISIBLE_TIMEOUT_S, VISIBLE_POLL_S = 120.0, 2.0


class IamError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"IAM {status}: {message}")
        self.status = status


class IamApi:
    def __init__(self, credentials, project: str, endpoint: str | None = None, sleep=time.sleep):
        from google.auth.transport.requests import AuthorizedSession

        self.session = AuthorizedSession(credentials)
        self.project, self.sleep = project, sleep
        self.base = f"{(endpoint or DEFAULT_ENDPOINT).rstrip('/')}/v1/projects/{project}/serviceAccounts"

    def _call(self, method: str, url: str, body: dict | None = None, params: dict | None = None) -> dict:
        from infra.gcp.retry import RATE_LIMIT_TRIES, backoff_s

        for attempt in range(RATE_LIMIT_TRIES):  # 429: IAM's per-minute API quota (retried, never a refusal)
            r = self.session.request(method, url, json=body, params=params, timeout=60)
            if r.status_code != 429 or attempt == RATE_LIMIT_TRIES - 1:
                break
            self.sleep(backoff_s(attempt))
        if r.status_code >= 400:
            try:
                message = r.json().get("error", {}).get("message", r.text)
            except ValueError:
                message = r.text
            raise IamError(r.status_code, message)
        return r.json() if r.content else {}

    def get(self, email: str) -> dict | None:
        try:
            return self._call("GET", f"{self.base}/{quote(email, safe='@.')}")
        except IamError as e:
            if e.status == 404:
                return None
            raise

    def ensure_service_account(self, account: str, *, display_name: str, description: str) -> str:
        """Create projects/P/serviceAccounts/ACCOUNT (409: it exists, reused); its email."""
        body = {"accountId": account, "serviceAccount": {"displayName": display_name, "description": description}}
        email = f"{account}@{self.project}.iam.gserviceaccount.com"
        try:
            email = self._call("POST", self.base, body)["email"]
        except IamError as e:
            if e.status != 409:
                raise
        self.wait_visible(email)
        return email

    def wait_visible(self, email: str) -> None:
        """Until GET answers (a just-made account can read as 404, or 403, for a while)."""
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        while True:
            try:
                if self.get(email) is not None:
                    return
            except IamError as e:
                if e.status != 403:
                    raise
            if time.monotonic() > deadline:
                raise IamError(404, f"service account {email} was made but is still not visible "
                                    f"after {VISIBLE_TIMEOUT_S:.0f} s")
            self.sleep(VISIBLE_POLL_S)

    def delete(self, email: str) -> bool:
        try:
            self._call("DELETE", f"{self.base}/{quote(email, safe='@.')}")
            return True
        except IamError as e:
            if e.status == 404:
                return False
            raise

    def list(self, limit: int, page_size: int = 100) -> list[dict]:
        """The project's accounts, at most `limit` (pageSize is at most 100: projects.serviceAccounts/list)."""
        accounts: list[dict] = []
        params = {"pageSize": min(page_size, limit)}
        while len(accounts) < limit:
            page = self._call("GET", self.base, params=params)
            accounts += page.get("accounts", [])
            if not page.get("nextPageToken"):
                break
            params = {**params, "pageToken": page["nextPageToken"]}
        return accounts[:limit]
