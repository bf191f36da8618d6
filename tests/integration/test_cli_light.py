"""`dlrun --help` and every `dlrun X --help` import none of pydantic, ray, torch or a cloud SDK (and so
stay fast); the command list that `dlrun --help` prints without importing the commands is theirs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "ray", "torch", "boto3", "botocore", "google", "moto", "matplotlib", "sklearn", "numpy",
         "aiohttp", "jinja2", "orchestrator.ui")  # the last three: `dlrun ui`'s web app
HELPS = [[], ["submit"], ["status"], ["logs"], ["cancel"], ["down"], ["schema"], ["plan"], ["catalog"],
         ["catalog", "refresh"], ["schedule"], ["schedule", "add"], ["schedule", "list"], ["schedule", "runs"],
         ["schedule", "remove"], ["schedule", "pause"], ["schedule", "resume"], ["scheduler"], ["cost-report"],
         ["dashboard"], ["ui"]]


def modules_after(argv: list[str]) -> tuple[str, list[str]]:
    """What `dlrun ARGV --help` prints, and the modules it imported (in a fresh interpreter)."""
    code = ("import sys, json\nfrom orchestrator.cli.main import main\n"
            f"try:\n    main({argv + ['--help']!r})\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('MODS=' + json.dumps(sorted(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    out, mods = r.stdout.split("MODS=")
    return out, json.loads(mods)


@pytest.mark.parametrize("argv", HELPS, ids=lambda a: " ".join(a) or "dlrun")
def test_help_imports_nothing_heavy(argv):
    out, mods = modules_after(argv)
    loaded = [m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == [], (argv, loaded)
    assert "Usage:" in out


def test_the_top_level_help_lists_every_command_with_its_own_short_help():
    from click.testing import CliRunner

    from orchestrator.cli.main import LAZY_COMMANDS, cli

    out, _ = modules_after([])
    for name, (module, attr, short) in LAZY_COMMANDS.items():
        import importlib

        cmd = getattr(importlib.import_module(module), attr)
        assert cmd.get_short_help_str(1000) == short, name  # the copy kept for --help is the command's own
        assert f"  {name} " in out
    listed = CliRunner().invoke(cli, ["--help"]).output
    for name in ("submit", "status", "logs", "cancel", "down", "schema", *LAZY_COMMANDS):
        assert f"  {name} " in listed, name
