"""`dlrun --help` must not import ray, torch, boto3 or google.cloud (and so stays fast)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("ray", "torch", "boto3", "botocore", "google.cloud", "moto", "matplotlib", "sklearn")


def test_help_imports_nothing_heavy():
    code = ("import sys\nfrom orchestrator.cli.main import cli\n"
            "try:\n    cli.main(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "import json\nprint('MODS=' + json.dumps(sorted(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    mods = json.loads(r.stdout.split("MODS=")[1])
    loaded = [m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == [], loaded
    assert "Commands:" in r.stdout and "submit" in r.stdout and "plan" in r.stdout


def test_subcommand_help_is_light_too():
    for cmd in ("submit", "status", "plan", "schedule", "catalog"):
        code = (f"import sys\nfrom orchestrator.cli.main import cli\n"
                f"try:\n    cli.main(['{cmd}', '--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
                "print('MODS=' + ' '.join(sys.modules))")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
        mods = r.stdout.split("MODS=")[1].split()
        assert not [m for m in mods if m.split(".")[0] in ("ray", "torch", "boto3", "moto")], (cmd, r.stdout[:300])
