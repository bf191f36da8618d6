"""The three IAM service-account calls dlrun makes, over REST (no IAM client library is installed).

v1 projects.serviceAccounts create/get/delete (cloud.google.com/iam/docs/reference/rest/v1/
projects.serviceAccounts); `endpoint` replaces https://iam.googleapis.com for an emulator.
"""
from __future__ import annotations

from urllib.parse import quote

DEFAULT_ENDPOINT = "https://iam.googleapis.com"


class IamError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"IAM {status}: {message}")
        self.status = status


class IamApi:
    def __init__(self, credentials, project: str, endpoint: str | None = None):
        from google.auth.transport.requests import AuthorizedSession

        self.session = AuthorizedSession(credentials)
        self.project = project
        self.base = f"{(endpoint or DEFAULT_ENDPOINT).rstrip('/')}/v1/projects/{project}/serviceAccounts"

    def _call(self, method: str, url: str, body: dict | None = None) -> dict:
        r = self.session.request(method, url, json=body, timeout=60)
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
        try:
            return self._call("POST", self.base, body)["email"]
        except IamError as e:
            if e.status != 409:
                raise
        return f"{account}@{self.project}.iam.gserviceaccount.com"

    def delete(self, email: str) -> bool:
        try:
            self._call("DELETE", f"{self.base}/{quote(email, safe='@.')}")
            return True
        except IamError as e:
            if e.status == 404:
                return False
            raise
