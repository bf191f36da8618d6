"""dlrun's commands run in-process as the main CLI runs them, on a job file written for the test."""
import yaml
from click.testing import CliRunner

from orchestrator.errors import DlrunError


def job_file(tmp_path, **fields):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "job": "cnn", **fields}))
    return str(path)


def invoke(command, args):
    """Run a command as the main CLI would: a DlrunError becomes its exit code."""
    result = CliRunner().invoke(command, args)
    code = result.exception.exit_code if isinstance(result.exception, DlrunError) else result.exit_code
    return code, result
