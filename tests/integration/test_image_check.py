"""`image:` checked against a registry before anything is provisioned (`dlrun plan` in process, the stand-in
OCI registry of tests/support/oci_registry.py, a stand-in podman on PATH): the pull in the start-up, and
every refusal as one line with its exit code."""
import base64
import json
import socket

import pytest

from infra.images import registry as registry_module
from orchestrator.cli import plan as cli_plan
from tests.support.cli import invoke, job_file
from tests.support.container_runtime import fake_podman
from tests.support.oci_registry import OciRegistry

REFERENCE = {"accelerator": "cpu", "hours": 0.05}
GB = 1_000_000_000
PASSWORD = "s3cret-Pa55"


@pytest.fixture(autouse=True)
def machine(monkeypatch, tmp_path):
    """A CPU machine with podman (the stand-in) and no registry logins; no manifest remembered."""
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    monkeypatch.setenv("DLRUN_CATALOG_REFRESH", "off")
    bin_dir = tmp_path / "bin"
    fake_podman(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DOCKER_CONFIG",
                "DLRUN_INSECURE_REGISTRIES", "DLRUN_CONTAINER_RUNTIME"):
        monkeypatch.delenv(var, raising=False)
    registry_module._cache.clear()


def plan(tmp_path, image, *extra, clouds=("local",), **fields):
    path = job_file(tmp_path, reference=REFERENCE, image=image, resources={"clouds": list(clouds)}, **fields)
    return invoke(cli_plan.plan_command, [path, *extra])


def auth_file(tmp_path, monkeypatch, registry: str, user: str, password: str):
    path = tmp_path / "auth.json"
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    path.write_text(json.dumps({"auths": {registry: {"auth": token}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(path))
    return path


def test_an_image_found_adds_its_pull_to_the_start_up_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_LOCAL_PULL_MB_S", "80")
    with OciRegistry(auth="token") as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [2 * GB, GB + 200_000_000], "linux/arm64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0", "--json")
        assert code == 0, result.output
        data = json.loads(result.stdout)
        assert any("the image's 3.2 GB pull: ~40 s" in n for n in data["notes"]), data["notes"]
        with_image = data["chosen"]["estimate"]["startup_seconds"]
        assert len(reg.manifest_requests()) == 3  # 401, then the index and the amd64 manifest with the token
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0", "--json")
        assert code == 0 and len(reg.manifest_requests()) == 3  # remembered: the registry is not asked again
    path = job_file(tmp_path, reference=REFERENCE, resources={"clouds": ["local"]})
    code, result = invoke(cli_plan.plan_command, [path, "--json"])
    without = json.loads(result.stdout)["chosen"]["estimate"]["startup_seconds"]
    assert with_image - without == pytest.approx(40.0)


def test_an_image_already_in_the_runtime_is_not_pulled_again(tmp_path, monkeypatch):
    with OciRegistry() as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        bin_dir = tmp_path / "bin"
        fake_podman(bin_dir, images=(f"{reg.address}/team/train:1.0",))
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0", "--json")
    assert code == 0, result.output
    assert any("already on this machine" in n for n in json.loads(result.stdout)["notes"])


def test_a_missing_tag_is_one_line_and_exit_2(tmp_path):
    with OciRegistry(auth="token") as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/train:2.0")
    assert code == 2
    message = str(result.exception)
    assert "no such tag" in message and "MANIFEST_UNKNOWN" in message and "team/train:2.0" in message
    assert "\n" not in message and "Traceback" not in result.output


def test_a_repository_hub_will_not_name_reads_as_missing_or_needing_a_login(tmp_path):
    with OciRegistry(auth="token") as reg:
        code, result = plan(tmp_path, f"{reg.address}/nobody/nothing:1")
    assert code == 2
    assert "does not exist or needs a login" in str(result.exception)
    assert f"podman login {reg.address}" in str(result.exception)


def test_an_arm64_only_image_has_no_build_for_this_machine(tmp_path):
    with OciRegistry() as reg:
        reg.add_image("team/arm", "1.0", {"linux/arm64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/arm:1.0")
    assert code == 2
    assert "has no linux/amd64 build (it has: linux/arm64)" in str(result.exception)


def test_refused_basic_credentials_are_named_by_their_file_never_shown(tmp_path, monkeypatch):
    with OciRegistry(auth="basic", users={"alice": "right-one"}) as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        path = auth_file(tmp_path, monkeypatch, reg.address, "alice", PASSWORD)
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0")
    assert code == 2
    assert "refused the credentials" in str(result.exception) and str(path) in str(result.exception)
    assert PASSWORD not in result.output and PASSWORD not in str(result.exception)


def test_auth_file_credentials_open_a_private_image_and_never_appear(tmp_path, monkeypatch):
    with OciRegistry(auth="token", users={"alice": PASSWORD}) as reg:
        reg.add_image("team/private", "1.0", {"linux/amd64": [GB]}, public=False)
        code, result = plan(tmp_path, f"{reg.address}/team/private:1.0")
        assert code == 2 and "needs a login" in str(result.exception)  # anonymous: refused
        registry_module._cache.clear()
        auth_file(tmp_path, monkeypatch, f"https://{reg.address}/v1/", "alice", PASSWORD)
        code, result = plan(tmp_path, f"{reg.address}/team/private:1.0", "--json")
        assert code == 0, result.output
        token_calls = [r for r in reg.requests if r.path == "/token" and r.authorized]
        assert token_calls and token_calls[-1].authorization.startswith("Basic ")
    assert PASSWORD not in result.output
    assert base64.b64encode(f"alice:{PASSWORD}".encode()).decode() not in result.output


def _outside_address() -> str | None:
    """This machine's address on a non-loopback interface (a registry there is not 'local')."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only the route's source address is chosen
            ip = s.getsockname()[0]
    except OSError:
        return None
    return None if ip.startswith("127.") else ip


def test_plain_http_is_refused_for_a_registry_that_is_not_local_unless_listed(tmp_path, monkeypatch):
    ip = _outside_address()
    if ip is None:
        pytest.skip("this machine has no non-loopback address to serve a 'remote' registry on")
    with OciRegistry(host=ip) as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0")
        assert code == 2
        assert "does not answer HTTPS" in str(result.exception)
        assert "DLRUN_INSECURE_REGISTRIES" in str(result.exception)
        assert not reg.manifest_requests()  # nothing went over plain HTTP
        monkeypatch.setenv("DLRUN_INSECURE_REGISTRIES", f"other.example:5000,{reg.address}")
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0")
        assert code == 0, result.output


def test_an_unreachable_registry_is_one_line_and_exit_5(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the with ends: nothing listens there
    code, result = plan(tmp_path, f"127.0.0.1:{port}/team/train:1.0")
    assert code == 5
    assert "cannot be reached" in str(result.exception) and "\n" not in str(result.exception)


def test_no_container_runtime_here_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("DLRUN_CONTAINER_RUNTIME", "podman-nowhere")
    with OciRegistry() as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0")
        assert reg.manifest_requests()  # the registry has it: what is missing is the runtime
    assert code == 2
    assert "apt-get install podman" in str(result.exception)


def test_without_a_container_runtime_a_mistyped_image_is_the_registrys_answer(tmp_path, monkeypatch):
    """The registry is read before anything that needs a runtime here: its answer is the real problem."""
    monkeypatch.setenv("DLRUN_CONTAINER_RUNTIME", "podman-nowhere")
    with OciRegistry(auth="token") as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.1")
    assert code == 2
    message = str(result.exception)
    assert "no such tag" in message and "team/train:1.1" in message and "runtime" not in message, message


def test_a_registry_on_this_machine_rules_the_clouds_out_saying_why(tmp_path):
    """A cloud node cannot reach this machine's localhost: each VM offer is excluded with the reason."""
    with OciRegistry() as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [GB]})
        code, result = plan(tmp_path, f"{reg.address}/team/train:1.0", "--json", "--any-cloud",  # no credentials
                            clouds=("aws", "gcp"))
    assert code == 3  # nothing fits
    reasons = {c["reason"] for c in json.loads(result.output)["candidates"] if "retired" not in c["reason"]}
    assert reasons == {f"the image's registry {reg.address} is on this machine, which a {cloud} node cannot reach: "
                       "push the image to a registry the node reaches" for cloud in ("aws", "gcp")}
