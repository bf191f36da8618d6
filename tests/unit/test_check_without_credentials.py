"""`dlrun check` in a fresh HOME with no credentials (in-process: the unit tier's guard fails any socket, so
nothing here reaches a network), and where each cloud's credentials would come from (infra/refresh/logins.py)."""
import json

import pytest

from infra.refresh.logins import aws_login, gcp_login
from orchestrator.cli.check import check_command
from tests.support.cli import invoke
from tests.support.credentials import without_cloud_credentials

@pytest.fixture
def fresh_home(monkeypatch, tmp_path):
    return without_cloud_credentials(monkeypatch, tmp_path)


def test_fresh_home_says_what_is_usable_and_how_to_fix_the_rest(fresh_home):
    code, result = invoke(check_command, [])
    assert code == 4
    out = result.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "aws: not usable — no AWS credentials found" in out and "run `aws configure`" in out
    assert "gcp: not usable — no GCP application default credentials" in out
    assert "run `gcloud auth application-default login`" in out
    assert "local: usable — this machine: " in out and "no GPU" in out
    assert out.rstrip().endswith("usable: no cloud; only local (this machine)")
    assert str(result.exception) == ("no cloud is usable (the fixes are above); `--backend local` runs jobs "
                                     "on this machine")


def test_fresh_home_json(fresh_home):
    code, result = invoke(check_command, ["--json"])
    assert code == 4
    report = json.loads(result.stdout)
    assert report["usable"] == []
    assert report["clouds"]["aws"]["usable"] is False and "aws configure" in report["clouds"]["aws"]["fix"]
    assert report["clouds"]["gcp"]["account"] is None
    assert {"backend": "local", "usable": True, "counts": False} | {"note": report["others"][0]["note"]} \
        == report["others"][0]


def test_local_alone_is_usable(fresh_home):
    code, result = invoke(check_command, ["--cloud", "local"])
    assert code == 0 and result.stdout.startswith("local: usable")


def test_aws_sources_in_boto3s_order(fresh_home, monkeypatch):
    aws = fresh_home / ".aws"
    aws.mkdir()
    (aws / "config").write_text("[profile dev]\nsso_session = corp\nregion = eu-west-1\n")
    login = aws_login()
    assert not login.usable and login.missing == "no default AWS profile (~/.aws has dev)"
    assert "export AWS_PROFILE=dev" in login.fix
    monkeypatch.setenv("AWS_PROFILE", "dev")
    login = aws_login()
    assert login.usable and login.source.startswith("profile dev (AWS_PROFILE): SSO in ")
    assert login.region == "eu-west-1"
    monkeypatch.setenv("AWS_PROFILE", "prod")
    assert aws_login().problem == ("AWS profile 'prod' (AWS_PROFILE) has no credentials in ~/.aws: "
                                   "run `aws configure --profile prod`")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    assert aws_login().missing == "AWS_SECRET_ACCESS_KEY is not set (the other half of the key is)"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert aws_login().source == "environment variables AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY"


def test_gcp_key_file_and_project_from_gcloud_config(fresh_home, monkeypatch):
    gcloud = fresh_home / ".config" / "gcloud"
    (gcloud / "configurations").mkdir(parents=True)
    key = fresh_home / "key.json"
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    assert gcp_login().missing.endswith("which is not a file")
    key.write_text(json.dumps({"type": "service_account", "client_email": "trainer@p.iam.gserviceaccount.com"}))
    login = gcp_login()
    assert login.missing == "no GCP project configured" and "gcloud config set project" in login.fix
    (gcloud / "active_config").write_text("work")
    (gcloud / "configurations" / "config_work").write_text("[core]\nproject = my-proj\n")
    login = gcp_login()
    assert login.usable and login.account == "my-proj"
    assert login.source == ("GOOGLE_APPLICATION_CREDENTIALS: service account trainer@p.iam.gserviceaccount.com "
                            "(~/key.json)")


def test_an_ec2_instance_or_a_gce_vm_has_its_own_credentials(fresh_home, monkeypatch, tmp_path):
    from infra.refresh import logins

    dmi = tmp_path / "dmi"
    dmi.mkdir()
    monkeypatch.setattr(logins, "DMI_DIR", dmi)  # the firmware's identity, as /sys/class/dmi/id has it
    (dmi / "sys_vendor").write_text("Amazon EC2\n")
    assert aws_login().usable and "instance's role" in aws_login().source
    assert not gcp_login().usable
    (dmi / "sys_vendor").write_text("Google\n")
    (dmi / "product_name").write_text("Google Compute Engine\n")
    assert not aws_login().usable
    login = gcp_login()
    assert login.usable and "Compute Engine VM's service account" in login.source


def test_no_team_cluster_configured(fresh_home):
    code, result = invoke(check_command, ["--cloud", "cluster"])
    assert code == 4 and result.stdout.startswith("cluster: not usable — none configured: add one under clusters:")
