"""Registry credentials from the cloud SDKs: ECR's GetAuthorizationToken (under moto) and Google's application
default credentials (none here: the one-line hint), and docker's credential helper protocol (a stand-in
`docker-credential-*` on PATH: `get`, the server URL on stdin, JSON {Username, Secret} on stdout, exit 1
with "credentials not found in native keychain" for an unknown server, as docker-credential-helpers do)."""
import json
import os
import sys

import pytest

from infra.images.credentials import CredentialsProblem, credential_for, from_google

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"


@pytest.fixture(autouse=True)
def no_auth_files(tmp_path, monkeypatch):
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_an_ecr_registry_gets_a_token_from_ecr(monkeypatch):
    from moto import mock_aws

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        cred = credential_for(ECR, "team/train")
    assert cred is not None and cred.username == "AWS" and cred.password
    assert cred.source == "ECR GetAuthorizationToken" and cred.password not in repr(cred)


def test_google_registries_without_credentials_say_how_to_log_in(tmp_path, monkeypatch):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(CredentialsProblem, match="gcloud auth application-default login"):
        from_google("us-central1-docker.pkg.dev")
    assert from_google("ghcr.io") is None


def test_a_credential_helper_is_asked_as_docker_asks_it(tmp_path, monkeypatch):
    helper = tmp_path / "bin" / "docker-credential-teststore"
    helper.parent.mkdir()
    helper.write_text(f"""#!{sys.executable}
import json, sys
assert sys.argv[1:] == ["get"]
server = sys.stdin.read().strip()
if server != "https://index.docker.io/v1/":
    print("credentials not found in native keychain"); sys.exit(1)
print(json.dumps({{"ServerURL": server, "Username": "hubuser", "Secret": "hub-secret"}}))
""")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{helper.parent}:{os.environ['PATH']}")
    (tmp_path / "docker").mkdir()
    (tmp_path / "docker" / "config.json").write_text(json.dumps({"credsStore": "teststore"}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    cred = credential_for("docker.io", "library/ubuntu")
    assert cred is not None and (cred.username, cred.password) == ("hubuser", "hub-secret")
    assert credential_for("quay.io", "team/x") is None
