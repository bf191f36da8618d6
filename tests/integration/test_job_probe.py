"""No made-up hours: a job with neither workload nor reference is timed by a short local run of its
entrypoint (real scripts here), its progress read from jobs.metrics lines; no progress is exit 2."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import SpecError
from orchestrator.planning import planner
from orchestrator.planning.job_probe import cached_probe, extrapolate, probe_job, run_probe, share_done
from orchestrator.planning.spec import load_job
from orchestrator.planning.workdir import workdir_digest
from tests.support.planning import LOCAL_CPU
from tests.support.probe_jobs import RAY_ENTRYPOINT_ENV, cpu_hogs, nested_lstm_job, timed_run

pytestmark = pytest.mark.timing  # its estimates are checked against runs minutes later: make test runs it alone
ROOT = Path(__file__).resolve().parents[2]
WALL_SLACK = 3.0  # an estimate within this factor of a run timed minutes later on a shared machine (was 10-70)
RANGE_SLACK = 1.5  # the range's slow end may miss such a run by this factor
QUIET_SLACK = 1.1  # a "quiet" run on a shared machine is not quite: its wall varied by ~10 % from run to run

# a real training-like script: N epochs of a fixed duration each, after a start of START seconds
SCRIPT = """
import os, sys, time
time.sleep(float(sys.argv[3]))
from jobs.metrics import probing, report, report_result
epochs, each = int(sys.argv[1]), float(sys.argv[2])
for epoch in range(1, epochs + 1):
    time.sleep(each)
    report(epoch=epoch, epochs=epochs, loss=1.0 / epoch, samples_per_s=1000.0, probing=probing(),
           ckpt=os.environ["DLRUN_CHECKPOINT_DIR"])
report_result(done=True)
"""


def job_file(tmp_path, run: str, script: str = SCRIPT, **fields) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text(script)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "probed", "run": run, "workdir": "work", **fields}))
    return path


def test_share_done_reads_the_progress_keys():
    assert share_done({"epoch": 3, "epochs": 12}) == 0.25
    assert share_done({"step": 50, "steps": 200, "loss": 1}) == 0.25
    assert share_done({"progress": 0.4, "epoch": 1, "epochs": 10}) == 0.4  # the explicit share wins
    for payload in ({"loss": 0.3}, {"event": "resumed", "epoch": 2, "epochs": 4}, {"epoch": 1, "epochs": 0},
                    {"progress": "soon"}, {"progress": 1.5}):
        assert share_done(payload) is None


def test_extrapolate_counts_the_start_once():
    # 4 s of start, then 1 % per second: 104 s in all
    assert extrapolate([(5.0, 0.01), (6.0, 0.02), (9.0, 0.05)]) == pytest.approx(104.0)
    assert extrapolate([(8.0, 0.5)]) == pytest.approx(16.0)  # one point: all of it at that rate


def test_a_short_job_is_timed_to_its_end_and_planned_from_it(tmp_path):
    spec = load_job(job_file(tmp_path, "python train.py 4 0.3 0.5"))
    t0 = time.monotonic()
    probe = probe_job(spec)
    took = time.monotonic() - t0
    assert probe.complete and probe.probe_seconds <= took
    assert 1.7 <= probe.run_seconds <= took  # 0.5 s start + 4 × 0.3 s, plus the interpreter's own start
    assert [round(p, 2) for _, p in probe.points] == [0.25, 0.5, 0.75, 1.0] and probe.samples_per_s == 1000.0
    assert cached_probe(spec) == probe and probe_job(spec) == probe  # the second plan runs nothing

    plan = planner.plan(spec, [LOCAL_CPU, *planner_offers()])
    local = next(c for c in plan.candidates if c.offer.cloud == "local")
    from orchestrator.planning.startup import ray_share_seconds

    # the probe timed the job's process from its spawn; only Ray's share of a job's start is added
    assert local.estimate.start_seconds == pytest.approx(ray_share_seconds()) and ray_share_seconds() > 0
    assert local.estimate.run_seconds == pytest.approx(probe.run_seconds + ray_share_seconds())
    assert plan.profile.source == "probe" and "measured by running the job here" in plan.notes[0]
    gpus = {c.offer.accelerator: c.estimate.run_seconds for c in plan.candidates if c.offer.accelerator
            and c.offer.accelerator_count == 1 and not c.spot}
    assert gpus["H100"] < gpus["T4"]  # scaled like a reference, not copied


def planner_offers():
    from infra.catalog import load_offers

    return load_offers()


def test_the_job_is_told_it_is_probed_and_keeps_its_checkpoints_elsewhere(tmp_path):
    out = tmp_path / "lines.txt"
    script = SCRIPT.replace("report(epoch", "print(probing(), os.environ['DLRUN_CHECKPOINT_DIR'], "
                                            "file=open(sys.argv[4], 'a'))\n    report(epoch")
    script += "open('outputs.txt', 'w').write('written in its working directory')\n"
    spec = load_job(job_file(tmp_path, f"python train.py 2 0.1 0 {out}", script, env={"SEED": "1"}))
    code = workdir_digest(spec.workdir)
    probe_job(spec)
    assert workdir_digest(spec.workdir) == code  # it ran in a copy, as in Ray's working_dir
    assert not (tmp_path / "work" / "outputs.txt").exists()
    lines = out.read_text().splitlines()
    assert lines and all(line.startswith("True ") for line in lines)
    ckpt = lines[0].split()[1]
    assert "dlrun-probe-" in ckpt and not Path(ckpt).exists()  # a throw-away directory, removed after


def test_a_long_job_is_stopped_and_extrapolated(tmp_path):
    pidfile = tmp_path / "pid"
    script = "import os, sys\nopen(sys.argv[4], 'w').write(str(os.getpid()))\n" + SCRIPT
    spec = load_job(job_file(tmp_path, f"python train.py 40 0.25 1.0 {pidfile}", script))
    from orchestrator.runs.entrypoint import entrypoint
    from orchestrator.planning.job_probe import _probe_env

    probe = run_probe(spec.name, entrypoint(spec, local=True, workers=1), cwd=spec.workdir,
                      env=_probe_env(spec, str(tmp_path), spec.workdir), seconds=4.0, min_seconds=4.0)
    assert not probe.complete and probe.probe_seconds < 4.6
    assert len(probe.points) >= 3
    assert 8.0 <= probe.run_seconds <= 16.0  # 1 s start + 40 × 0.25 s, and the interpreter's start
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):  # the job itself was stopped, not only its shell
        os.kill(pid, 0)


def test_a_job_that_ends_by_itself_is_planned_from_its_measured_time(tmp_path, dlrun_home):
    """No progress lines needed: the probe saw the whole run (the issue's `ok` job, refused before)."""
    job = job_file(tmp_path, "python train.py", "import time\ntime.sleep(1.5)\nprint('ok')\n")
    probe = probe_job(load_job(job))
    assert probe.complete and not probe.points and 1.5 <= probe.run_seconds < 15
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "plan", str(job)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "measured by running the job here" in r.stdout + r.stderr and "ran to its end" in r.stdout + r.stderr


def test_a_crashing_job_is_one_line_with_its_last_words(tmp_path, dlrun_home):
    script = "print('loading data')\nprint('epoch 1/5 loss=0.9', flush=True)\nraise SystemExit('no GPU here, sorry')\n"
    job = job_file(tmp_path, "python train.py", script)
    with pytest.raises(SpecError, match=r"probe run .* failed \(exit 1; its last lines: loading data \| "
                                        r"epoch 1/5 loss=0.9 \| no GPU here, sorry\)"):
        probe_job(load_job(job))  # failed after reporting progress: still a failure, not a plan
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "plan", str(job)], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    error = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and "exit 1" in error[0] and "no GPU here" in error[0] and "Traceback" not in r.stderr


def test_a_slow_start_is_waited_for_and_silence_is_bounded(tmp_path):
    from orchestrator.planning.job_probe import _probe_env
    from orchestrator.runs.entrypoint import entrypoint

    def probe(run, script=SCRIPT):
        spec = load_job(job_file(tmp_path, run, script))
        return run_probe(spec.name, entrypoint(spec, local=True, workers=1), cwd=spec.workdir,
                         env=_probe_env(spec, str(tmp_path), spec.workdir), seconds=0.5, max_seconds=3.0)

    slow = probe("python train.py 10 0.2 1.0")  # first line after the 0.5 s probe time: still read
    assert slow.points and not slow.complete and slow.run_seconds >= 1.2
    t0 = time.monotonic()
    with pytest.raises(SpecError, match=r"reported no progress in \d+ s of a probe run"):
        probe("python train.py", "import time\ntime.sleep(60)\n")
    assert time.monotonic() - t0 < 12


def test_the_job_gets_the_threads_ray_gives_an_entrypoint_unless_it_sets_them(tmp_path, monkeypatch):
    """OMP_NUM_THREADS as on the head (tests/support/probe_jobs.py RAY_ENTRYPOINT_ENV; checked against a real head
    in tests/e2e/test_job_probe_on_a_head.py): Ray's 1 where neither the job nor the caller sets it."""
    from orchestrator.planning.job_probe import _probe_env

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    spec = load_job(job_file(tmp_path, "python train.py 1 0 0"))
    assert _probe_env(spec, str(tmp_path), spec.workdir)["OMP_NUM_THREADS"] == RAY_ENTRYPOINT_ENV["OMP_NUM_THREADS"]
    spec = load_job(job_file(tmp_path, "python train.py 1 0 0", env={"OMP_NUM_THREADS": "2"}))
    assert _probe_env(spec, str(tmp_path), spec.workdir)["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the head inherits the caller's environment, and Ray keeps it
    spec = load_job(job_file(tmp_path, "python train.py 1 0 0"))
    assert _probe_env(spec, str(tmp_path), spec.workdir)["OMP_NUM_THREADS"] == "3"


def test_a_nested_bar_job_beside_a_busy_process_is_planned_as_it_runs_whether_the_load_stays_or_goes(tmp_path):
    """The issue-42 script (configs/examples/tqdm_loop/nested_lstm.py: nested bars, the inner one leave=False, a
    stacked LSTM on its own sequences, torch's threads left alone), shortened: probed beside one CPU-bound
    process and quiet, and run to its end as the local head runs it (tests/support/probe_jobs.py timed_run), beside
    the process and quiet. A probe with a thread per core beside the process read 10-70x the run: its threads
    spun waiting for each other, burning CPU, where the run's one thread does not.

    The CPU the job used is compared first (the probe's estimate times the cores it got, against the run's CPU
    time): it does not move with what else the machine runs. The wall-clock figures, each a ratio of two figures
    measured here minutes apart on a shared 2-core machine whose other work moves a run by much, and measured
    once, get generous bounds; bench/probe_under_load.py prints them (the issue's goal: +/-35 %)."""
    from orchestrator.planning.job_probe import probe_note

    spec = load_job(nested_lstm_job(tmp_path, "--epochs", "60"))
    with cpu_hogs(1):
        loaded = probe_job(spec, refresh=True)
        run_loaded = timed_run(spec)
    quiet = probe_job(spec, refresh=True)
    run_quiet = timed_run(spec)
    said = (f"loaded: {probe_note(loaded)}, estimate {loaded.run_seconds:.1f} s, run {run_loaded}; quiet: "
            f"{probe_note(quiet)}, estimate {quiet.run_seconds:.1f} s, run {run_quiet}")
    assert not loaded.complete and loaded.cpu is not None and loaded.busy, said
    for probe, run in ((loaded, run_loaded), (quiet, run_quiet)):
        assert probe.cpu is not None, said
        assert 0.5 <= probe.measured_seconds * probe.cpu["share"] / run.cpu <= 2.0, said
        assert 1 / WALL_SLACK <= probe.run_seconds / run.wall <= WALL_SLACK, said
        assert probe.run_low <= probe.run_seconds <= probe.run_high, said
    # the range printed beside the busy process holds the run, the load gone or kept (kept: within RANGE_SLACK)
    assert loaded.run_low <= run_quiet.wall * QUIET_SLACK and run_loaded.wall <= loaded.run_high * RANGE_SLACK, said


def test_a_workdir_with_a_socket_in_it_is_probed_without_it(tmp_path):
    """A server's socket in the workdir (a Ray session's, a database's) is no part of the code: left out of the
    probe's copy, where copying it failed with a traceback."""
    import socket

    spec = load_job(job_file(tmp_path, "python train.py 2 0.1 0"))
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "work" / "server.sock"))
        result = probe_job(spec)
    # (and the threads it ran with are recorded: Ray's one, what a cloud VM's CPU speed-up starts from)
    assert result.complete and result.threads == 1


@pytest.fixture
def registry(monkeypatch, tmp_path):
    """The stand-in OCI registry (tests/support/oci_registry.py) with team/train:1.0 for amd64 and arm64, a private
    team/secret:1.0 and an arm64-only team/arm:1.0; no registry logins, no manifest remembered."""
    from infra.images import registry as registry_module
    from tests.support.oci_registry import OciRegistry

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("REGISTRY_AUTH_FILE", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DOCKER_CONFIG",
                "DLRUN_INSECURE_REGISTRIES"):
        monkeypatch.delenv(var, raising=False)
    registry_module._cache.clear()
    with OciRegistry(auth="token") as reg:
        reg.add_image("team/train", "1.0", {"linux/amd64": [10_000_000], "linux/arm64": [10_000_000]})
        reg.add_image("team/secret", "1.0", {"linux/amd64": [10_000_000]}, public=False)
        reg.add_image("team/arm", "1.0", {"linux/arm64": [10_000_000]})
        yield reg


def test_a_job_with_an_image_is_probed_in_its_image(tmp_path, monkeypatch, registry):
    """The probe runs the job as a local job with `image:` runs: through the runtime (the stand-in podman, which
    records the run and executes it on the host), so the speed measured is the image's."""
    from tests.support.container_runtime import calls, fake_podman

    image = f"{registry.address}/team/train:1.0"
    bin_dir = tmp_path / "bin"
    fake_podman(bin_dir, images=(image,))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    spec = load_job(job_file(tmp_path, "python3 train.py 3 0.2 0.3", image=image))
    probe = probe_job(spec)
    assert probe.complete and [round(p, 2) for _, p in probe.points] == [0.33, 0.67, 1.0]
    runs = [c for c in calls(bin_dir) if c[:1] == ["run"]]
    assert runs and all(image in c for c in runs) and "DLRUN_PROBE" in runs[-1]
    spec_without = load_job(job_file(tmp_path, "python3 train.py 3 0.2 0.3"))
    assert cached_probe(spec_without) is None  # another environment: probed on its own


def test_a_job_with_an_image_and_no_runtime_here_says_the_three_ways_to_time_it(tmp_path, monkeypatch, registry):
    """The registry has the image: what is missing is a runtime here, and the message names the three ways."""
    monkeypatch.setenv("DLRUN_CONTAINER_RUNTIME", "podman-nowhere")
    spec = load_job(job_file(tmp_path, "python3 train.py 3 0.2 0.3", image=f"{registry.address}/team/train:1.0"))
    with pytest.raises(SpecError) as e:
        probe_job(spec)
    assert registry.manifest_requests()  # the registry was asked first
    message = str(e.value)
    assert "no container runtime works here" in message and "install podman" in message, message
    assert "add `workload:`" in message and "`reference:`" in message and "\n" not in message, message
    assert "its registry has it" in message and "jobs.metrics" not in message, message  # nothing else helps


@pytest.mark.parametrize("image, answer", [
    ("team/train:2.0", "no such tag (MANIFEST_UNKNOWN)"),  # a mistyped tag
    ("team/secret:1.0", "needs a login"),  # a private repository, no login here
    ("team/arm:1.0", "has no linux/amd64 build (it has: linux/arm64)"),  # no build for the clouds' platform
])
def test_an_image_the_registry_refuses_is_its_answer_on_a_machine_without_a_runtime(tmp_path, registry, image,
                                                                                    answer):
    """Issue 42: `dlrun plan` of a job with `image:`, clouds aws and gcp, neither workload nor reference, and no
    podman or docker here: the registry's answer, one line, exit 2, never 'no container runtime'."""
    job = job_file(tmp_path, "python3 train.py 3 0.2 0.3", image=f"{registry.address}/{image}",
                   resources={"clouds": ["aws", "gcp"]})
    env = dict(os.environ, DLRUN_CONTAINER_RUNTIME="podman-nowhere", DLRUN_CATALOG_REFRESH="off",
               DLRUN_LOCAL_GPUS="none")
    # --any-cloud: planned as if aws and gcp had credentials here (without, exit 4 says so first)
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "plan", str(job), "--any-cloud"],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and answer in lines[0] and image.split(":")[0] in lines[0], r.stderr
    assert "container runtime" not in r.stderr and "Traceback" not in r.stderr
