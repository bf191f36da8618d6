"""infra/refresh/clients.py: which credentials the refresh's GCP calls carry. An endpoint setting alone (a
Private Service Connect endpoint) keeps the user's; only DLRUN_GCP_EMULATOR=1 makes them anonymous."""
import json

from google.auth.credentials import AnonymousCredentials

from infra.refresh.clients import GcpClients, gcp_credentials_configured


def _adc(monkeypatch, tmp_path):
    adc = tmp_path / "adc.json"  # what `gcloud auth application-default login` writes
    adc.write_text(json.dumps({"type": "authorized_user", "client_id": "id", "client_secret": "secret",
                               "refresh_token": "token", "quota_project_id": "p"}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))


def test_an_endpoint_alone_keeps_the_users_credentials(monkeypatch, tmp_path):
    _adc(monkeypatch, tmp_path)
    monkeypatch.setenv("DLRUN_GCP_API_ENDPOINT", "https://compute-dlrun.p.googleapis.com")
    monkeypatch.setenv("DLRUN_GCP_BILLING_ENDPOINT", "https://cloudbilling-dlrun.p.googleapis.com")
    monkeypatch.delenv("DLRUN_GCP_EMULATOR", raising=False)
    creds = GcpClients()._creds()
    assert not isinstance(creds, AnonymousCredentials) and creds.refresh_token == "token"


def test_an_emulator_is_called_without_credentials_and_needs_none(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p")
    monkeypatch.setenv("DLRUN_GCP_API_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("DLRUN_GCP_EMULATOR", raising=False)
    assert "application default credentials" in (gcp_credentials_configured() or "")
    monkeypatch.setenv("DLRUN_GCP_EMULATOR", "1")
    assert gcp_credentials_configured() is None
    assert isinstance(GcpClients()._creds(), AnonymousCredentials)
