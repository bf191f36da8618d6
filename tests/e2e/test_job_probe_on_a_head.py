"""The probe runs a job with the threads the local Ray head gives it: a job's entrypoint on a real head and the
same job probed (job_probe.probe_job) each write what they were given (OMP_NUM_THREADS and torch's threads), and
the two agree. A probe with torch's default (a thread per core) times another program than the run: beside a
busy process it was 10-70x slower (tests/integration/test_job_probe.py)."""
import time
import uuid

import pytest

from orchestrator.planning.job_probe import probe_job
from orchestrator.planning.spec import load_job
from tests.support.probe_jobs import RAY_ENTRYPOINT_ENV

pytestmark = pytest.mark.ray

SCRIPT = """import os, sys
import torch
with open(sys.argv[1], "a") as f:
    f.write(f"{os.environ.get('OMP_NUM_THREADS')} {torch.get_num_threads()}\\n")
"""


def test_the_probe_gives_the_job_the_threads_the_head_gives_it(ray_head, dlrun_home, tmp_path):
    from orchestrator.runs.entrypoint import entrypoint, runtime_env
    from orchestrator.runs.ray_jobs import RayJobs

    work = tmp_path / "work"
    work.mkdir()
    (work / "threads.py").write_text(SCRIPT)
    on_head, probed = tmp_path / "head.txt", tmp_path / "probe.txt"
    job = tmp_path / "job.yaml"
    job.write_text(f"name: threads\nrun: python threads.py {on_head}\nworkdir: work\n")
    spec = load_job(job)
    jobs = RayJobs(ray_head.dashboard_url)
    sid = f"threads-{uuid.uuid4().hex[:8]}"
    jobs.submit(entrypoint=entrypoint(spec, local=True, workers=1), submission_id=sid, metadata={},
                runtime_env=runtime_env(spec, job_id=sid, checkpoint=str(tmp_path / "ckpt"), price_per_hour=0.0,
                                        local=True), log=lambda line: None)
    deadline = time.monotonic() + 180
    while not jobs.status(sid).terminal and time.monotonic() < deadline:
        time.sleep(0.5)
    assert jobs.status(sid).value == "SUCCEEDED", jobs.logs(sid)[-2000:]

    job.write_text(f"name: threads\nrun: python threads.py {probed}\nworkdir: work\n")
    assert probe_job(load_job(job)).complete
    head_omp, head_threads = on_head.read_text().split()
    assert probed.read_text().split() == [head_omp, head_threads]
    assert head_omp == RAY_ENTRYPOINT_ENV["OMP_NUM_THREADS"]  # the support module's description of Ray holds
