"""What a probed job would take alone, from what it got on a busy machine (orchestrator/planning/cpu_share.py):
samples as /proc gives them (CPU seconds of the job, the machine's busy seconds, each thread's time on a CPU and
time runnable but waiting), over a 10 s window on 2 cores."""
import pytest

from orchestrator.planning import cpu_share
from orchestrator.planning.cpu_share import CpuSample


def window(*, job_cpu: float, machine_cpu: float, threads: list[tuple[float, float]], wall: float = 10.0):
    """First and last sample of a window in which the job's threads ran / waited the given seconds."""
    first = CpuSample(wall=100.0, job=5.0, machine=50.0, tasks={("1", str(i)): (1.0, 1.0) for i in range(len(threads))})
    last = CpuSample(wall=100.0 + wall, job=5.0 + job_cpu, machine=50.0 + machine_cpu,
                     tasks={("1", str(i)): (1.0 + ran, 1.0 + waited) for i, (ran, waited) in enumerate(threads)})
    return first, last


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    monkeypatch.setattr(cpu_share, "cores", lambda: 2)


def test_a_cpu_bound_thread_that_got_half_a_core_beside_a_hog_would_use_a_whole_one_alone():
    use = cpu_share.use_between(*window(job_cpu=5.0, machine_cpu=15.0, threads=[(5.0, 5.0)]))
    assert use.share == pytest.approx(0.5) and use.others == pytest.approx(1.0) and use.busy
    assert use.wanted == pytest.approx(1.0) and use.slowdown == pytest.approx(2.0)


def test_two_cpu_bound_threads_sharing_two_cores_with_two_hogs_would_take_both_alone():
    use = cpu_share.use_between(*window(job_cpu=10.0, machine_cpu=20.0, threads=[(5.0, 5.0), (5.0, 5.0)]))
    assert use.wanted == pytest.approx(2.0) and use.slowdown == pytest.approx(2.0)


def test_a_job_that_mostly_sleeps_is_hardly_faster_alone_though_its_few_slices_waited_long():
    """A sleep-paced job (0.25 s a step) probed beside busy processes: it ran 0.06 s and waited 0.11 s for a CPU
    in 10 s. Alone it would save those 0.11 s, not two thirds of its time (it was planned at 3.6 s for 11 s)."""
    use = cpu_share.use_between(*window(job_cpu=0.06, machine_cpu=20.0, threads=[(0.06, 0.11)]))
    assert use.share == pytest.approx(0.006) and use.busy
    assert use.slowdown == pytest.approx(10.0 / (10.0 - 0.11))


def test_a_quiet_machine_corrects_nothing():
    use = cpu_share.use_between(*window(job_cpu=9.8, machine_cpu=10.0, threads=[(9.8, 0.0)]))
    assert not use.busy and use.wanted == pytest.approx(use.share) and use.slowdown == 1.0
