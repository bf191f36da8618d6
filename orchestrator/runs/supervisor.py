"""`python -m orchestrator.runs.supervisor JOB_ID [--resume]`: runs a detached job's lifecycle (runner.execute).

--resume re-attaches to the attempt a dead supervisor left (see orchestrator/reconcile.py).
"""
import sys

from orchestrator.cli.render.display import PlainDisplay
from orchestrator.errors import DlrunError
from orchestrator.runs.executor import execute


def main(argv: list[str]) -> int:
    job_id, resume = argv[0], "--resume" in argv[1:]
    try:
        res = execute(job_id, display=PlainDisplay(sys.stdout), resume=resume)
        from orchestrator.cli.render.summary import result_line
        from orchestrator.state.db import default_store

        print(result_line(default_store(), job_id), flush=True)
        return res.exit_code
    except DlrunError as e:
        print(f"dlrun: {e.message}", flush=True)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
