"""A cloud node's boot with a job's `image:` (infra/vm/container_boot.py), run for real by bash as cloud-init runs
it, against stand-ins for the image's runtime, apt-get and the registry (tests/support/runtime_stubs.py): what it
installs, pulls, refuses and starts, and that no credential is ever in the script. The whole path on emulated
VMs with a real podman, registry and apt mirror: tests/e2e/test_cloud_image_e2e.py."""
from __future__ import annotations

import base64
import json
import shlex

import pytest

from infra.base import BootstrapConfig
from infra.vm.bootstrap import startup_script
from tests.support.boot_stubs import node, uv_calls  # noqa: F401 (fixture)
from tests.support.runtime_stubs import VmRuntime

IMAGE = "registry.example:5000/team/train:1.0"
MIRROR = "http://10.0.0.1:8080/debian"
CFG = BootstrapConfig(ray_version="2.60.0", container_image=IMAGE, apt_mirror=MIRROR)
AUTH = base64.b64encode(b"team:pa55word").decode()


@pytest.fixture
def vm(tmp_path, node):  # noqa: F811
    runtime = VmRuntime(tmp_path)
    home = tmp_path / "home"

    def boot(cfg=CFG, *, auth: str | None = None, **kw):
        if auth:  # what dlrun hands over through SSH before the token (infra/vm/ready.py)
            (home / ".dlrun-registry-auth.json").write_text(json.dumps({"auths": {"registry.example:5000": {
                "auth": auth}}}))
        return node(startup_script(cfg, is_head=True, cluster_id="c-1"), **kw)

    runtime.boot = boot
    return runtime


def argv_of(calls: list[str], prefix: str) -> list[list[str]]:
    return [shlex.split(c) for c in calls if c.startswith(prefix)]


def test_a_stock_image_gets_podman_from_the_mirror_pulls_with_the_handed_over_credentials_and_runs_ray_inside(
        vm, tmp_path):
    vm.mirror_has_podman(MIRROR)
    vm.registry(plain_http=True, auth=AUTH)
    cfg = BootstrapConfig(**{**CFG.__dict__, "container_insecure": True, "python_packages": ["einops==0.8.1"]})
    rc, calls, node_dir, out = vm.boot(cfg, auth=AUTH)
    assert rc == 0, out
    assert (node_dir / "ready").exists()
    # podman from the mirror only: the image's own sources are not read
    update, install = argv_of(calls, "apt-get")
    assert f"Dir::Etc::SourceList={node_dir}/apt-sources.list" in update and "Dir::Etc::SourceParts=/dev/null" in update
    assert (node_dir / "apt-sources.list").read_text().split()[:2] == ["deb", MIRROR]
    assert install[-4:] == ["install", "-y", "--no-install-recommends", "podman"]
    # pulled over plain HTTP (listed insecure) with the credentials dlrun handed over, kept 0600 on the node
    [pull] = argv_of(calls, "podman pull")
    assert pull == ["podman", "pull", "--tls-verify=false", "--authfile", f"{node_dir}/registry-auth.json", IMAGE]
    assert (node_dir / "registry-auth.json").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "home" / ".dlrun-registry-auth.json").exists()
    # no Ray in the image: the client's Ray and the job's packages go into a venv of the image's python3, by uv
    # run inside the image
    venv = f"{node_dir}/image-venv"
    [make_venv] = [c for c in argv_of(calls, "podman run --rm") if "venv" in c]
    assert make_venv[-5:] == ["venv", "--system-site-packages", "--python", "python3", venv]
    [pip] = uv_calls(calls)
    assert pip[-2:] == ["pip", "einops==0.8.1"] and "ray[default,train]==2.60.0" in pip
    # the Ray node: one long-lived container with the host's network and IPC, the node directory mounted
    [run] = argv_of(calls, "podman run -d")
    assert run[:7] == ["podman", "run", "-d", "--name", "dlrun-ray", "--network", "host"]
    assert ["-v", f"{node_dir}:{node_dir}"] == run[run.index("-v"):run.index("-v") + 2]
    assert {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "PIP_INDEX_URL"} <= {run[i + 1] for i, a in enumerate(run)
                                                                         if a == "-e"}
    assert "--device" not in run and "--gpus" not in run  # a CPU offer
    [start] = [c for c in argv_of(calls, "podman exec") if "start" in c]
    assert start[:3] == ["podman", "exec", "dlrun-ray"] and f"{venv}/bin/python" in start
    assert start[start.index("start"):][:2] == ["start", "--head"]
    # nothing secret in what the cloud keeps (user-data / metadata)
    script = startup_script(cfg, is_head=True)
    assert AUTH not in script and "pa55word" not in script


def test_an_image_with_the_clients_ray_runs_it_as_is(vm):
    vm.installed("podman")
    vm.image(ray="2.60.0")
    rc, calls, node_dir, out = vm.boot()
    assert rc == 0, out
    assert not argv_of(calls, "apt-get") and not uv_calls(calls, "venv") and not uv_calls(calls)
    [start] = [c for c in argv_of(calls, "podman exec") if "start" in c]
    assert start[start.index("-m") - 1] == "python3"  # the image's own python3
    assert "the image has Ray 2.60.0" in out


def test_an_image_without_python_is_refused_with_the_reason(vm):
    vm.installed("podman")
    vm.image(python=False)
    rc, calls, node_dir, _ = vm.boot()
    assert rc != 0
    assert "has no python3" in (node_dir / "failed").read_text()
    assert not argv_of(calls, "podman run -d")


def test_a_mirror_without_podman_fails_the_boot_with_apts_words(vm):
    rc, calls, node_dir, _ = vm.boot()  # the mirror lacks podman
    assert rc != 0
    failed = (node_dir / "failed").read_text()
    assert f"could not install podman from {MIRROR}" in failed and "Unable to locate package podman" in failed


def test_refused_credentials_fail_the_boot_with_the_registrys_words(vm):
    vm.installed("podman")
    vm.registry(auth=AUTH)
    rc, _, node_dir, _ = vm.boot(auth=base64.b64encode(b"team:wrong").decode())
    assert rc != 0
    assert "unauthorized" in (node_dir / "failed").read_text()


def test_docker_on_a_gpu_image_gets_the_gpus_and_its_own_auth_config(vm):
    """The clouds' deep-learning images ship docker with the NVIDIA Container Toolkit: `--gpus all`, and the
    credentials in a docker config (docker has no --authfile)."""
    vm.installed("docker")
    vm.gpus()
    vm.registry(auth=AUTH)
    cfg = BootstrapConfig(**{**CFG.__dict__, "gpu_count": 1, "gpu_memory_gb": 80})
    rc, calls, node_dir, out = vm.boot(cfg, auth=AUTH)
    assert rc == 0, out
    [run] = argv_of(calls, "docker run -d")
    assert run[run.index("--gpus") + 1] == "all"
    assert (node_dir / "docker" / "config.json").stat().st_mode & 0o777 == 0o600
    checks = [c for c in argv_of(calls, "docker exec") if "torch" in " ".join(c)]
    assert checks, "torch must see the GPUs inside the container"


def test_podman_without_the_nvidia_toolkit_cannot_pass_gpus_and_says_so(vm):
    vm.installed("podman")
    vm.gpus()
    cfg = BootstrapConfig(**{**CFG.__dict__, "gpu_count": 1, "gpu_memory_gb": 80})
    rc, _, node_dir, _ = vm.boot(cfg)
    assert rc != 0
    assert "no nvidia-ctk" in (node_dir / "failed").read_text()


def test_docker_refuses_a_plain_http_registry_instead_of_pulling_insecurely(vm):
    vm.installed("docker")
    rc, _, node_dir, _ = vm.boot(BootstrapConfig(**{**CFG.__dict__, "container_insecure": True}))
    assert rc != 0
    assert "insecure-registries" in (node_dir / "failed").read_text()


def test_a_script_over_ec2s_16_kb_goes_gzip_compressed_as_cloud_init_takes_it():
    import gzip

    from infra.aws.compute import USER_DATA_LIMIT, user_data

    cfg = BootstrapConfig(**{**CFG.__dict__, "container_insecure": True, "gpu_count": 8, "gpu_memory_gb": 80,
                             "python_packages": [f"package-{i}==1.0" for i in range(20)],
                             "pip_index_url": "https://pypi.example.internal/simple"})
    script = startup_script(cfg, is_head=False, head_ip="10.0.0.5")
    data = user_data(script)
    assert len(script.encode()) > USER_DATA_LIMIT
    assert isinstance(data, bytes) and len(data) < USER_DATA_LIMIT / 2 and gzip.decompress(data).decode() == script
    plain = startup_script(BootstrapConfig(ray_version="2.60.0"), is_head=True)
    assert user_data(plain) == plain  # what fits stays readable in the console


def test_an_image_with_the_clients_ray_gets_only_the_jobs_packages_in_its_venv(vm):
    vm.installed("podman")
    vm.image(ray="2.60.0")
    # the bucket client twice, as a run asks for it (the checkpoint's package) and the provider too: once
    packages = ["boto3==1.40.0", "boto3==1.40.0"]
    rc, calls, node_dir, out = vm.boot(BootstrapConfig(**{**CFG.__dict__, "python_packages": packages}))
    assert rc == 0, out
    [pip] = uv_calls(calls)
    assert pip[-2:] == ["pip", "boto3==1.40.0"] and pip.count("boto3==1.40.0") == 1
    assert not [a for a in pip if a.startswith("ray")]
    assert "the image has Ray 2.60.0: installing pip boto3==1.40.0 into /" in out, out
