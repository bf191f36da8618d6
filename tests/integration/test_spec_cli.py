"""The job file's mistakes through the real `dlrun` process: one `dlrun: error:` line and exit 2, never a
traceback; `dlrun schema` prints the job file's JSON schema."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bad_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\njob: cnn\nresources:\n  accelerators: Z9:1\n")
    for cmd in (["submit", str(bad)], ["plan", str(bad)], ["submit", str(tmp_path / "missing.yaml")],
                ["submit", str(ROOT / "configs/examples/digits_cnn.yaml"), "--max-cost", "-3"]):
        r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", *cmd], capture_output=True, text=True,
                           cwd=ROOT)
        assert r.returncode == 2, (cmd, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        assert r.stderr.strip().count("\n") == 0, r.stderr
        assert r.stderr.startswith("dlrun: error:")


def test_schema_is_json_schema():
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli.main", "schema"], capture_output=True, text=True,
                       cwd=ROOT, check=True)
    schema = json.loads(r.stdout)
    assert schema["title"] == "dlrun job file"
    assert {"name", "resources", "budget", "workload"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
