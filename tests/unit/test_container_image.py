"""`image:` in process: references normalised as docker reads them, the job file's one-line mistakes, the spec
hash of jobs without an image, the runtime's argv (GPU flags as the runtime receives them), credentials from
the auth files, and what a team cluster's submission carries (Ray's image_uri)."""
import base64
import json

import pytest

from infra.images.credentials import Credential, from_auth_files
from infra.images.reference import is_local_registry, parse_reference
from infra.images.runtime import ContainerRun, Mount, container_argv
from orchestrator.errors import SpecError
from orchestrator.planning.spec import parse_job

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("text,full,api_host,reference", [
    ("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
     "registry-1.docker.io", "2.5.1-cuda12.4-cudnn9-runtime"),
    ("ubuntu", "docker.io/library/ubuntu:latest", "registry-1.docker.io", "latest"),
    ("index.docker.io/library/python:3.11", "docker.io/library/python:3.11", "registry-1.docker.io", "3.11"),
    ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io", "24.05-py3"),
    (f"localhost:5000/team/train@{DIGEST}", f"localhost:5000/team/train@{DIGEST}", "localhost:5000", DIGEST),
    (f"ghcr.io/org/img:v1@{DIGEST}", f"ghcr.io/org/img:v1@{DIGEST}", "ghcr.io", DIGEST),
])
def test_references_are_normalised_as_docker_reads_them(text, full, api_host, reference):
    ref = parse_reference(text)
    assert (ref.full, ref.api_host, ref.reference) == (full, api_host, reference)


@pytest.mark.parametrize("line,says", [
    ("image: Ubuntu:22.04", "repository name 'Ubuntu' must be lowercase"),
    ("image: 'ubuntu:'", "tag '' is not valid"),
    ("image: ubuntu@sha256:abc", "'sha256:abc' is not a digest"),
    ("image: 'a b'", "has spaces"),
    ("image: ubuntu\nimage_pull: sometimes", "Input should be 'always' or 'if-missing'"),
])
def test_a_wrong_image_field_is_one_line_naming_file_field_and_line(line, says):
    with pytest.raises(SpecError) as e:
        parse_job(f"name: t\njob: cnn\n{line}\n", "job.yaml")
    assert e.value.exit_code == 2 and says in e.value.message and "\n" not in e.value.message
    assert e.value.message.startswith("job.yaml:3: field 'image") or e.value.message.startswith("job.yaml:4:")


def test_image_pull_without_an_image_and_requirements_with_one_are_refused():
    with pytest.raises(SpecError, match="'image_pull' goes with 'image:'"):
        parse_job("name: t\njob: cnn\nimage_pull: always\n", "job.yaml")
    with pytest.raises(SpecError, match="build them into the image"):
        parse_job("name: t\nrun: python3 x.py\nimage: ubuntu\nrequirements: [tqdm]\n", "job.yaml")


def test_a_job_without_an_image_keeps_its_spec_hash_and_one_with_an_image_gets_another():
    plain = parse_job("name: t\njob: cnn\n", "j")
    assert plain.spec_hash() == "d4cdfbe073afdac4"  # the hash before `image:` existed
    assert parse_job("name: t\njob: cnn\nimage: ubuntu\n", "j").spec_hash() != plain.spec_hash()


def test_loopback_registries_are_local_others_are_not():
    assert all(map(is_local_registry, ["localhost:5000", "127.0.0.1:5000", "127.1.2.3", "[::1]:5000", "localhost"]))
    assert not any(map(is_local_registry, ["192.0.2.2:5000", "registry.example", "localhost.example:5000"]))


def _run(**kw):
    return ContainerRun(image="docker.io/library/python:3.11", command=("python3", "-c", "print(1)"),
                        env_names=("DLRUN_JOB_ID", "RAY_AUTH_TOKEN_PATH"), workdir="/w",
                        mounts=(Mount("/w", "/w"), Mount("/t", "/t", read_only=True)), **kw)


def test_podman_gets_the_gpus_through_cdi_and_docker_through_gpus_all():
    podman = container_argv("podman", _run(gpus=True, user="1000:1000"))
    docker = container_argv("/usr/bin/docker", _run(gpus=True, user="1000:1000", pull="always"))
    assert podman[podman.index("--device") + 1] == "nvidia.com/gpu=all" and "--gpus" not in podman
    assert docker[docker.index("--gpus") + 1] == "all" and "--device" not in docker
    assert "--user" not in podman and docker[docker.index("--user") + 1] == "1000:1000"  # rootless podman maps
    assert podman[podman.index("--pull") + 1] == "missing" and docker[docker.index("--pull") + 1] == "always"
    for argv in (podman, docker):
        assert argv[1:6] == ["run", "--rm", "--network", "host", "--ipc"]
        assert argv[-4:] == ["docker.io/library/python:3.11", "python3", "-c", "print(1)"]
        assert ["-v", "/w:/w"] == argv[argv.index("-v"):argv.index("-v") + 2] and "/t:/t:ro" in argv
        assert ["-e", "DLRUN_JOB_ID", "-e", "RAY_AUTH_TOKEN_PATH"] == argv[argv.index("-e"):argv.index("-e") + 4]


def test_a_cpu_run_asks_for_no_gpu():
    argv = container_argv("podman", _run())
    assert "--device" not in argv and "--gpus" not in argv


def _auth(tmp_path, monkeypatch, doc, env="REGISTRY_AUTH_FILE", name="auth.json"):
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DOCKER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    monkeypatch.setenv(env, str(path) if env == "REGISTRY_AUTH_FILE" else str(tmp_path))
    return path


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def test_docker_hub_credentials_are_found_under_dockers_legacy_key(tmp_path, monkeypatch):
    _auth(tmp_path, monkeypatch, {"auths": {"https://index.docker.io/v1/": {"auth": _b64("ann:pw:with:colons")}}},
          env="DOCKER_CONFIG", name="config.json")
    found = from_auth_files("docker.io", "pytorch/pytorch")
    assert found is not None and (found.username, found.password) == ("ann", "pw:with:colons")
    assert "pw:with:colons" not in repr(found) and "config.json" in found.source


def test_podman_namespace_entries_win_over_the_registry_entry(tmp_path, monkeypatch):
    _auth(tmp_path, monkeypatch, {"auths": {"quay.io": {"auth": _b64("all:a")},
                                            "quay.io/team": {"auth": _b64("team:t")}}})
    assert from_auth_files("quay.io", "team/train").username == "team"
    assert from_auth_files("quay.io", "other/x").username == "all"
    assert from_auth_files("ghcr.io", "team/train") is None


def test_basic_header_carries_the_pair_and_the_record_never_shows_it():
    cred = Credential("u", "secret", "here")
    assert cred.basic() == "Basic " + _b64("u:secret") and "secret" not in repr(cred)


def test_a_team_cluster_gets_rays_image_uri_and_nothing_ray_refuses_beside_it():
    from orchestrator.planning.image_check import cluster_image_reason
    from orchestrator.runs.entrypoint import entrypoint, image_mode, runtime_env

    spec = parse_job("name: t\nrun: python3 /app/train.py\nimage: ghcr.io/team/train:1\nenv: {SEED: '1'}\n", "j")
    assert image_mode(spec, "cluster:lab") == "image_uri" and image_mode(spec, "local") == "runtime"
    assert image_mode(spec, "aws") == ""  # the VM's boot script will run Ray in the image (not yet)
    renv = runtime_env(spec, job_id="j", checkpoint="/shared/ck", price_per_hour=1.0, local=False, image="image_uri")
    assert set(renv) == {"env_vars", "image_uri"} and renv["image_uri"] == "ghcr.io/team/train:1"
    assert entrypoint(spec, local=False, workers=1, image="image_uri") == "python3 /app/train.py"
    assert cluster_image_reason(spec) is None
    builtin = parse_job("name: t\njob: cnn\nimage: ghcr.io/team/train:1\n", "j")
    assert "a built-in job" in cluster_image_reason(builtin)


def test_a_clusters_pip_packages_are_dropped_beside_image_uri_as_ray_refuses_them():
    from orchestrator.runs.attempt import _backend_submission

    class Cluster:  # what submission_extras of infra/ray_cluster returns for a job with requirements
        def submission_extras(self, offer, workers, cluster):
            return {"runtime_env": {"pip": {"packages": ["boto3"]}}, "metadata": {"cluster": "lab"}}

    submission = {"runtime_env": {"env_vars": {"A": "1"}, "image_uri": "ghcr.io/t/x:1"}, "metadata": {}}
    _backend_submission(Cluster(), submission, None, 1, None)  # type: ignore[arg-type]
    assert submission["runtime_env"] == {"env_vars": {"A": "1"}, "image_uri": "ghcr.io/t/x:1"}
    assert submission["metadata"] == {"cluster": "lab"}


def test_a_team_clusters_shared_checkpoints_out_of_the_image_are_said_in_the_plan():
    """image_uri mounts only /tmp/ray into the job's container: a shared_path checkpoint there is not the
    cluster's shared file system, and the plan says so; a bucket checkpoint says nothing."""
    from types import SimpleNamespace

    from infra.images.reference import parse_reference
    from orchestrator.planning.image_check import ImagePlan, image_notes

    image = ImagePlan(ref=parse_reference("ghcr.io/team/train:1"), pull="if-missing")
    offer = SimpleNamespace(cloud="cluster:lab")
    shared = image_notes(image, SimpleNamespace(offer=offer, checkpoint="/srv/team/dlrun-checkpoints/j"))
    assert any("not in its container" in n and "/srv/team/dlrun-checkpoints/j" in n for n in shared)
    bucket = image_notes(image, SimpleNamespace(offer=offer, checkpoint="s3://team/ckpt"))
    assert not any("not in its container" in n for n in bucket)


def test_a_nodes_registry_auth_file_carries_this_machines_credential_under_the_keys_runtimes_look_up(
        tmp_path, monkeypatch):
    """What dlrun hands a cloud node over SSH before the Ray token (infra/vm/ready.py): a containers auth file
    with the credential this machine has for the image's registry; Docker Hub under podman's and docker's keys."""
    from infra.base import Cluster
    from infra.vm.ready import registry_auth

    token = base64.b64encode(b"team:s3cret").decode()
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"auths": {"ghcr.io": {"auth": token}, "docker.io": {"auth": token}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth))

    def cluster(image: str | None) -> Cluster:
        c = Cluster("c-1", "aws", "us-east-1", "us-east-1a", "m5.large", False, 0.1)
        if image:
            c.extra["container_image"] = image
        return c

    assert json.loads(registry_auth(cluster("ghcr.io/team/train:1")) or "") == {"auths": {"ghcr.io": {"auth": token}}}
    hub = json.loads(registry_auth(cluster("docker.io/team/train:1")) or "")["auths"]
    assert set(hub) == {"docker.io", "https://index.docker.io/v1/"}
    assert registry_auth(cluster(None)) is None
    assert registry_auth(cluster("quay.io/other/image:1")) is None  # nothing known for it: pulled anonymously
