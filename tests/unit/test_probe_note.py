"""The plan's note for a probed job (orchestrator/planning/job_probe.py probe_note): what it says of a busy machine,
and the range as the probe measured it, floored by how much one job's runs vary (RUN_LOW/RUN_HIGH)."""
from orchestrator.planning.job_probe import ProbeResult, probe_note


def busy_probe(stable: bool) -> ProbeResult:
    # 28 s as measured while the job got 0.5 of the 1.0 core it uses alone: 14 s alone (cpu_share.py)
    return ProbeResult(run_seconds=28.0 if stable else 14.0, probe_seconds=12.0, complete=False, spread=0.03,
                       stable=stable, measured_seconds=28.0, run_low=9.8, run_high=37.8, busy=True,
                       cpu={"share": 0.5, "others": 1.5, "cores": 2, "wanted": 1.0})


def test_a_steady_busy_probe_says_the_jobs_time_alone_not_the_floored_range_end():
    note = probe_note(busy_probe(stable=True))
    assert "range 10-38 s" in note
    assert note.endswith("the job got 0.5 of the 1.0 it uses alone): planned as it ran, about 14 s alone"), note


def test_an_unsteady_busy_probe_says_what_it_corrected():
    assert probe_note(busy_probe(stable=False)).endswith(": corrected from 28 s")
