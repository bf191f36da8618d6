"""The lifecycle table (orchestrator/states.py): what each way an attempt ends leads to — the job status,
the recovery, whether the Ray job is stopped before teardown, dlrun's exit code — and Ray's own statuses."""
from __future__ import annotations

import pytest

from orchestrator.errors import EXIT_INTERRUPTED, EXIT_JOB_FAILED, EXIT_OK, EXIT_TERMINATED
from orchestrator.states import EXIT_BY_STATUS, Ending, JobStatus, RayJobStatus, Recovery, exit_code_for

S, R = JobStatus, Recovery
#          ending                   status             recovery     stops the Ray job   exit code
TABLE = [(Ending.SUCCEEDED,        S.SUCCEEDED,       R.NONE,      False,              EXIT_OK),
         (Ending.FAILED,           S.FAILED,          R.RESTART,   False,              EXIT_JOB_FAILED),
         (Ending.STOPPED,          S.CANCELLED,       R.NONE,      False,              EXIT_INTERRUPTED),
         (Ending.PREEMPTED,        S.RECOVERING,      R.PREEMPT,   True,               EXIT_JOB_FAILED),
         (Ending.BUDGET_EXCEEDED,  S.BUDGET_EXCEEDED, R.NONE,      True,               EXIT_JOB_FAILED),
         (Ending.INTERRUPTED,      S.CANCELLED,       R.NONE,      True,               EXIT_INTERRUPTED),
         (Ending.RELAUNCH,         S.RECOVERING,      R.RELAUNCH,  False,              EXIT_JOB_FAILED),
         (Ending.NOT_READY,        S.PROVISIONING,    R.FAILOVER,  False,              EXIT_JOB_FAILED)]


def test_the_table_covers_every_ending():
    assert sorted(row[0] for row in TABLE) == sorted(Ending)


@pytest.mark.parametrize("ending,status,recovery,stops,code", TABLE, ids=[row[0].value for row in TABLE])
def test_what_an_ending_leads_to(ending, status, recovery, stops, code):
    assert ending.to_status() is status
    assert ending.recovery is recovery
    assert ending.stops_job is stops
    assert ending.exit_code() == code


def test_an_ending_that_ends_the_job_ends_it_in_a_terminal_status():
    for ending in Ending:
        assert ending.to_status().terminal == (ending.recovery in (Recovery.NONE, Recovery.RESTART))


def test_a_cancel_by_sigterm_exits_143_and_nothing_else_changes():
    assert Ending.STOPPED.exit_code(sigterm=True) == EXIT_TERMINATED
    assert Ending.INTERRUPTED.exit_code(sigterm=True) == EXIT_TERMINATED
    assert Ending.SUCCEEDED.exit_code(sigterm=True) == EXIT_OK
    assert exit_code_for(JobStatus.FAILED, sigterm=True) == EXIT_JOB_FAILED


def test_exit_codes_by_status_are_for_the_terminal_statuses_and_read_plain_strings():
    assert set(EXIT_BY_STATUS) == {s for s in JobStatus if s.terminal}
    assert EXIT_BY_STATUS.get("SUCCEEDED") == EXIT_OK  # `dlrun status` looks up a status read from the store
    assert exit_code_for(JobStatus.RUNNING) == EXIT_JOB_FAILED  # a job not ended is no success


@pytest.mark.parametrize("ray,terminal", [("PENDING", False), ("RUNNING", False), ("STOPPED", True),
                                          ("SUCCEEDED", True), ("FAILED", True)])
def test_ray_statuses(ray, terminal):
    status = RayJobStatus(ray)
    assert status == ray and status.terminal is terminal
    if terminal:
        assert status.ending() is Ending(ray)
    else:
        with pytest.raises(ValueError, match="not ended"):
            status.ending()


def test_ray_statuses_are_those_of_rays_own_sdk():
    from ray.job_submission import JobStatus as RaysJobStatus

    assert {s.value for s in RayJobStatus} == {s.value for s in RaysJobStatus}
    assert {s.value for s in RayJobStatus if s.terminal} == {s.value for s in RaysJobStatus if s.is_terminal()}
