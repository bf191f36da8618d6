"""`python -m orchestrator.runs.supervisor JOB_ID [--resume]`: runs a detached job's lifecycle (runner.execute).

--resume re-attaches to the attempt a dead supervisor left (see orchestrator/reconcile.py). SIGTERM
cancels the job as `dlrun cancel` does (stops it, tears down, records time and cost) and exits 143.
"""
import sys

from orchestrator.cli.render.display import PlainDisplay
from orchestrator.errors import EXIT_TERMINATED, DlrunError
from orchestrator.runs.executor import execute
from orchestrator.runs.sigterm import Terminated, cancel_on_sigterm


def main(argv: list[str]) -> int:
    job_id, resume = argv[0], "--resume" in argv[1:]
    cancel_on_sigterm()
    try:
        res = execute(job_id, display=PlainDisplay(sys.stdout), resume=resume)
        _say_result(job_id)
        return res.exit_code
    except DlrunError as e:
        print(f"dlrun: {e.message}", flush=True)
        return e.exit_code
    except Terminated:  # stopped before the watch began (launching, submitting): recorded CANCELLED
        _say_result(job_id)
        return EXIT_TERMINATED


def _say_result(job_id: str) -> None:
    from orchestrator.cli.render.summary import result_line
    from orchestrator.state.db import default_store

    print(result_line(default_store(), job_id), flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
