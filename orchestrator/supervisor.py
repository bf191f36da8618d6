"""`python -m orchestrator.supervisor JOB_ID`: runs a detached job's lifecycle (see runner.execute)."""
import sys

from orchestrator.display import PlainDisplay
from orchestrator.errors import DlrunError
from orchestrator.runner import execute


def main(job_id: str) -> int:
    try:
        return execute(job_id, display=PlainDisplay(sys.stdout)).exit_code
    except DlrunError as e:
        print(f"dlrun: {e.message}", flush=True)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
