"""The settings table (orchestrator/settings.py) against the source that reads the settings, against
the settings page (docs/settings.md), and its typed readers."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator import settings
from orchestrator.errors import UsageError
from orchestrator.settings import BY_NAME, SETTINGS

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("orchestrator", "infra", "jobs")
DLRUN_NAME = re.compile(r"\bDLRUN_[A-Z0-9_]+\b")
# DLRUN_ words that are no setting, each with what it is
NOT_SETTINGS = {
    "DLRUN_METRIC": "the prefix of a job's progress lines (jobs/metrics.py)",
    "DLRUN_RESULT": "the prefix of a job's result line (jobs/metrics.py)",
    "DLRUN_ROOT": "a Python constant: where orchestrator/ and jobs/ are importable from",
    "DLRUN_SELF_END": "a heredoc delimiter in the boot script",
    "DLRUN_GET_UV": "a heredoc delimiter in the boot script",
    "DLRUN_WATCHDOG": "a heredoc delimiter in the boot script",
    "DLRUN_GCE_SELF_DELETE": "a heredoc delimiter in the GCE self-delete script",
    "DLRUN_LAB_CACHE": "read by the tests only (the VM lab's cache; docs/lab.md)",
    "DLRUN_TEST_IMAGE": "read by the tests only (the real local-runtime test; docs/lab.md)",
}
# variables read by name that are the process's, not settings: passed on to children or part of a cache key
PROCESS_WIDE = {"PATH", "PYTHONPATH", "OMP_NUM_THREADS"}
# os.environ.get("X"), os.environ["X"], os.getenv("X"), and FOO_ENV = "X" constants
READ_BY_NAME = re.compile(r"""(?:environ(?:\.get)?\s*[\[(]\s*|getenv\(\s*|_ENV\s*=\s*)"""
                          r"""["']([A-Za-z][A-Za-z0-9_]*)["']""")


def source_files(*dirs: str) -> list[Path]:
    return [p for d in dirs for p in sorted((ROOT / d).rglob("*"))
            if p.is_file() and p.suffix in (".py", ".sh", ".yaml", ".yml") and "__pycache__" not in p.parts]


def names_in(files: list[Path], pattern: re.Pattern) -> dict[str, str]:
    """name -> the first file it is found in."""
    found: dict[str, str] = {}
    for path in files:
        for name in pattern.findall(path.read_text()):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def settings_page() -> str:
    return (ROOT / "docs" / "settings.md").read_text()


def every_page() -> str:
    """README and every page under docs/."""
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])


def test_every_dlrun_name_in_the_source_has_a_row():
    found = names_in(source_files(*SOURCE_DIRS), DLRUN_NAME)
    missing = {n: where for n, where in found.items() if n not in BY_NAME and n not in NOT_SETTINGS}
    assert missing == {}, "add a row to orchestrator/settings.py SETTINGS for each (name: file)"


def test_every_variable_the_source_reads_by_name_has_a_row():
    found = names_in(source_files(*SOURCE_DIRS), READ_BY_NAME)
    missing = {n: where for n, where in found.items() if n not in BY_NAME and n not in PROCESS_WIDE}
    assert missing == {}, "add a row to orchestrator/settings.py SETTINGS for each (name: file)"


def test_every_dlrun_row_is_read_where_it_says():
    """No row outlives its variable: each DLRUN_ row's name is in the source of its readers."""
    product = set(names_in(source_files(*SOURCE_DIRS), DLRUN_NAME))
    stale = [s.name for s in SETTINGS if s.name.startswith("DLRUN_") and s.name not in product]
    assert stale == []


def test_the_settings_page_is_the_table():
    """Every row, with its default, is on docs/settings.md as the table says (regenerate:
    `python -m orchestrator.settings docs/settings.md`)."""
    assert settings.readme_block() in settings_page()
    for s in SETTINGS:
        line = next(line for line in settings_page().splitlines() if line.startswith(f"| `{s.name}` |"))
        assert (f"`{s.default}`" if s.default is not None else "—") in line, line


def test_every_dlrun_name_the_docs_mention_has_a_row():
    mentioned = set(DLRUN_NAME.findall(every_page()))
    assert sorted(mentioned - set(BY_NAME) - set(NOT_SETTINGS)) == []


def test_every_row_is_in_exactly_one_readme_group():
    counts = {s.name: sum(member(s) for _, member in settings.GROUPS) for s in SETTINGS}
    assert {n: c for n, c in counts.items() if c != 1} == {}
    assert len(BY_NAME) == len(SETTINGS), "a name has two rows"


def test_config_rows_are_the_keys_the_loaders_accept_with_their_defaults():
    from infra.ray_cluster.settings import KEYS as CLUSTER_KEYS
    from orchestrator.config import AWS_KEYS, DEFAULTS, MIRROR_KEYS

    rows = {s.name for s in SETTINGS if s.kind == "config"}
    expected = ({k for k, v in DEFAULTS.items() if not isinstance(v, dict)}
                | {f"mirrors.{k}" for k in MIRROR_KEYS} | {f"aws.{k}" for k in AWS_KEYS}
                | {f"clusters.NAME.{k}" for k in CLUSTER_KEYS})
    assert rows == expected
    assert {k.split(".")[0] for k in rows} == set(DEFAULTS)
    for key, value in DEFAULTS.items():
        if not isinstance(value, dict):
            assert BY_NAME[key].default == value


def test_defaults_are_the_ones_the_code_applies():
    """Rows whose readers are not converted yet: their default is the constant the code uses."""
    from infra.local.head import DEFAULT_DASHBOARD_PORT
    from infra.vm.bootstrap import NODE_DIR
    from jobs.notice import METADATA_URL

    assert int(BY_NAME["DLRUN_DASHBOARD_PORT"].default) == DEFAULT_DASHBOARD_PORT
    assert BY_NAME["DLRUN_NODE_DIR"].default == NODE_DIR
    assert BY_NAME["DLRUN_METADATA_URL"].default == METADATA_URL


def test_readers_take_the_value_else_the_rows_default(monkeypatch, tmp_path):
    monkeypatch.delenv("DLRUN_NODE_POLL_S", raising=False)
    assert settings.env_float("DLRUN_NODE_POLL_S") == 5.0
    monkeypatch.setenv("DLRUN_NODE_POLL_S", "")  # empty counts as unset
    assert settings.env_float("DLRUN_NODE_POLL_S") == 5.0
    monkeypatch.setenv("DLRUN_NODE_POLL_S", "0.5")
    assert settings.env_float("DLRUN_NODE_POLL_S") == 0.5
    monkeypatch.setenv("DLRUN_DASHBOARD_PORT", "8300")
    assert settings.env_int("DLRUN_DASHBOARD_PORT") == 8300
    monkeypatch.delenv("DLRUN_CATALOG_REFRESH", raising=False)
    assert settings.env_str("DLRUN_CATALOG_REFRESH") == "on"
    monkeypatch.delenv("DLRUN_RAY_ADDRESS", raising=False)
    assert settings.env_str("DLRUN_RAY_ADDRESS") == ""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("DLRUN_HOME", raising=False)
    assert settings.env_path("DLRUN_HOME") == tmp_path / ".dlrun"
    monkeypatch.delenv("DLRUN_SSH_CONFIG", raising=False)
    assert settings.env_path("DLRUN_SSH_CONFIG") is None


def test_a_bad_number_is_one_line_naming_the_variable_and_the_fix(monkeypatch):
    monkeypatch.setenv("DLRUN_BOOT_TIMEOUT", "15m")
    with pytest.raises(UsageError) as e:
        settings.env_float("DLRUN_BOOT_TIMEOUT")
    assert e.value.message == ("DLRUN_BOOT_TIMEOUT='15m' is not a number; set it like DLRUN_BOOT_TIMEOUT=900 "
                               "or unset it")
    monkeypatch.setenv("DLRUN_DASHBOARD_PORT", "82.5")
    with pytest.raises(UsageError, match="DLRUN_DASHBOARD_PORT='82.5' is not a whole number"):
        settings.env_int("DLRUN_DASHBOARD_PORT")


def test_a_name_without_a_row_or_read_as_another_type_is_refused():
    with pytest.raises(KeyError, match="DLRUN_NO_SUCH has no row"):
        settings.env_str("DLRUN_NO_SUCH")
    with pytest.raises(TypeError, match=r"DLRUN_NODE_POLL_S \(env setting\) is read as float, not str"):
        settings.env_str("DLRUN_NODE_POLL_S")
    with pytest.raises(TypeError, match=r"optimize \(config setting\)"):
        settings.env_str("optimize")
    with pytest.raises(TypeError, match="DLRUN_PRICE_PER_HOUR has no default"):
        settings.env_float("DLRUN_PRICE_PER_HOUR")


def test_the_readme_section_is_rewritten_in_place_and_a_readme_without_one_is_refused():
    text = f"intro\n{settings.README_START}\nstale rows\n{settings.README_END}\noutro\n"
    assert settings.with_readme_block(text) == f"intro\n{settings.readme_block()}\noutro\n"
    with pytest.raises(ValueError, match="has no"):
        settings.with_readme_block("no section here")
