"""A local job's command in its image: the entrypoint dlrun submits, infra/images/run_job.py run as the Ray
job runs it (a stand-in podman on PATH, tests/support/container_runtime.py), and a real container: podman
(Debian's, which .ci/run installs) configured for this machine, running the lab's Debian root imported as a
local image (tests/support/container_runtime.py real_runtime, lab_python_image)."""
import json
import os
import subprocess
import sys

import pytest

from orchestrator.planning.spec import parse_job
from orchestrator.runs.entrypoint import entrypoint, runtime_env
from tests.support.container_runtime import calls, fake_podman, lab_python_image, real_runtime

IMAGE = "registry.example:5000/team/train:1.0"


def _spec(text):
    return parse_job("name: t\n" + text, "job.yaml")


def test_the_entrypoint_runs_the_command_in_the_image_with_dlrun_helpers_on_the_host(tmp_path, monkeypatch):
    fake = fake_podman(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.delenv("DLRUN_CONTAINER_RUNTIME", raising=False)
    spec = _spec(f"run: python3 train.py --epochs 2\nimage: {IMAGE}\nenv: {{SEED: '1'}}\n")
    command = entrypoint(spec, local=True, workers=1, image="runtime", gpus=True)
    host_python = sys.executable
    assert command.startswith(f"{host_python} -m jobs.tee -- sh -c ")  # progress read on the host
    assert "infra.images.run_job" in command and f"--runtime {fake}" in command and "--gpus" in command
    assert "--env SEED" in command and "sh -c 'python3 train.py --epochs 2'" in command.replace("'\"'\"'", "'")
    renv = runtime_env(spec, job_id="j1", checkpoint=str(tmp_path / "ck"), price_per_hour=0.0, local=True,
                       image="runtime")
    assert "pip" not in renv and renv["env_vars"]["SEED"] == "1"


def test_a_builtin_job_in_the_image_uses_the_image_python(tmp_path, monkeypatch):
    fake = fake_podman(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    spec = _spec(f"job: cnn\nimage: {IMAGE}\n")
    command = entrypoint(spec, local=True, workers=1, image="runtime")
    assert "sh -c 'python3 -u -m jobs.cnn'" in command and "--gpus" not in command


def _run_job(tmp_path, fake, *command, env_extra=None):
    env = {"PATH": os.environ["PATH"], "DLRUN_JOB_ID": "j-42", "SEED": "7", "AWS_SECRET_ACCESS_KEY": "nope",
           "DLRUN_CHECKPOINT_DIR": str(tmp_path / "ck"), "PYTHONPATH": str(tmp_path / "mods"),
           "RAY_AUTH_TOKEN_PATH": str(tmp_path / "token"), **(env_extra or {})}
    (tmp_path / "mods").mkdir(exist_ok=True)
    (tmp_path / "token").write_text("secret-token")
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "infra.images.run_job", "--runtime", str(fake), "--image", IMAGE,
                           "--pull", "always", "--env", "SEED", "--", *command],
                          cwd=work, env=env, capture_output=True, text=True,
                          **{"timeout": 60}), work


def test_run_job_checks_python_then_runs_with_mounts_and_variables_by_name(tmp_path):
    fake = fake_podman(tmp_path / "bin")
    proc, work = _run_job(tmp_path, fake, "sh", "-c", 'echo "seed=$SEED job=$DLRUN_JOB_ID key=$AWS_SECRET_ACCESS_KEY"')
    assert proc.returncode == 0, proc.stderr
    assert "seed=7 job=j-42 key=" in proc.stdout and "nope" not in proc.stdout
    check, real = calls(tmp_path / "bin")
    assert check[-4:] == [IMAGE, "python3", "-c", check[-1]] and check[check.index("--pull") + 1] == "always"
    assert real[real.index("--pull") + 1] == "missing"  # pulled once, by the check
    volumes = [real[i + 1] for i, a in enumerate(real) if a == "-v"]
    assert f"{work}:{work}" in volumes and f"{tmp_path / 'ck'}:{tmp_path / 'ck'}" in volumes
    assert f"{tmp_path / 'mods'}:{tmp_path / 'mods'}:ro" in volumes
    assert f"{tmp_path / 'token'}:{tmp_path / 'token'}:ro" in volumes
    names = [real[i + 1] for i, a in enumerate(real) if a == "-e"]
    assert {"SEED", "DLRUN_JOB_ID", "DLRUN_CHECKPOINT_DIR", "RAY_AUTH_TOKEN_PATH", "PYTHONPATH"} <= set(names)
    assert "AWS_SECRET_ACCESS_KEY" not in names and not any("=" in n for n in names)  # names only, no values
    assert "secret-token" not in json.dumps(real)
    assert real[real.index("-w") + 1] == str(work) and "dlrun.job=j-42" in real


def test_an_image_without_python_is_refused_with_the_reason(tmp_path):
    fake = fake_podman(tmp_path / "bin", missing=("python3",))
    proc, _ = _run_job(tmp_path, fake, "sh", "-c", "echo never")
    assert proc.returncode == 2
    assert f"image {IMAGE} has no python3" in proc.stderr and "never" not in proc.stdout
    assert len(calls(tmp_path / "bin")) == 1  # the job itself never started


def test_a_real_container_runs_the_command_in_the_image_with_the_workdir_and_variables(tmp_path):
    runtime, env, why = real_runtime(tmp_path / "runtime")
    if runtime is None:
        pytest.skip(why)
    image = os.environ.get("DLRUN_TEST_IMAGE") or lab_python_image(runtime, env)  # a user's own image, if named
    work = tmp_path / "work"
    work.mkdir()
    # in the image, not on the host: its own PID namespace (the command is PID 1), no podman inside, the host's
    # working directory mounted at its own path, the job's variables by name, and python3 (checked first)
    script = ('echo "in-image pid=$$ job=$DLRUN_JOB_ID seed=$SEED" > out.txt; '
              'command -v podman >/dev/null && echo podman-inside >> out.txt; python3 -c "print(6 * 7)" >> out.txt')
    proc = subprocess.run([sys.executable, "-m", "infra.images.run_job", "--runtime", runtime, "--image", image,
                           "--env", "SEED", "--", "sh", "-c", script], cwd=work, capture_output=True, text=True,
                          env={**env, "DLRUN_JOB_ID": "real", "SEED": "3"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / "out.txt").read_text().splitlines() == ["in-image pid=1 job=real seed=3", "42"]
