"""README.md and docs/*.md against the code they describe: every relative link lands (file and #anchor), the
settings page's table is exactly the settings orchestrator/settings.py declares, every exit code the code
declares is on the exit-code page, every job-file field `dlrun schema` emits is on the job-file page, and
each command of README's tour exists (its `--help`, in process)."""
from __future__ import annotations

import inspect
import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# [text](target) and [text](target "title"), not images' sources; code spans and blocks are stripped first
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def without_code_blocks(text: str) -> str:
    """The text without fenced blocks and indented blocks (4 spaces after a blank line)."""
    text = FENCE.sub("", text)
    kept, in_block, previous_blank = [], False, True
    for line in text.splitlines():
        if line.startswith("    ") and (in_block or previous_blank):
            in_block = True
        elif line.strip():
            in_block = False
        if not in_block:
            kept.append(line)
        previous_blank = not line.strip()
    return "\n".join(kept)


def prose(text: str) -> str:
    """The text without code: code blocks and code spans."""
    return CODE_SPAN.sub("", without_code_blocks(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces as -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in a Markdown file (a repeated heading gets -1, -2 ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in without_code_blocks(path.read_text()).splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m[2])
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]  # http:, https:, mailto: ... are not checked here


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_a_broken_link_or_anchor_is_reported(tmp_path):
    """The checker itself: a missing file and a missing anchor are each found, a good pair is not."""
    (tmp_path / "there.md").write_text("# A page\n\n## Spot runs: the `notice`, and buckets\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](there.md) [ok](there.md#spot-runs-the-notice-and-buckets) [self](#top)\n"
                    "[gone](missing.md) [bad](there.md#no-such-heading) `[code](not-a-link.md)`\n\n"
                    "    [indented](code-block.md)\n\n# Top\n")
    assert [b.split(":")[0] for b in broken_links(page)] == ["missing.md", "there.md#no-such-heading"]


def test_every_page_under_docs_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in relative_links(README)}
    assert [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked] == []


# --- settings ------------------------------------------------------------------------------------------

SETTINGS_PAGE = DOCS / "settings.md"
TABLE_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|", re.M)


def settings_table(text: str) -> list[str]:
    """The names in the first column of the page's settings table (between its generated markers)."""
    from orchestrator import settings

    _, start, rest = text.partition(settings.README_START)
    table, end, _ = rest.partition(settings.README_END)
    assert start and end, f"{SETTINGS_PAGE.name} has lost its settings table's markers"
    return TABLE_ROW.findall(table)


def test_the_settings_page_lists_every_declared_setting_and_nothing_else():
    from orchestrator.settings import SETTINGS

    on_page = settings_table(SETTINGS_PAGE.read_text())
    declared = [s.name for s in SETTINGS]
    assert sorted(set(declared) - set(on_page)) == [], "declared but not on docs/settings.md"
    assert sorted(set(on_page) - set(declared)) == [], "on docs/settings.md but not declared"
    assert len(on_page) == len(set(on_page)), "a setting is on the page twice"


def test_a_setting_missing_from_or_foreign_to_the_page_is_found():
    from orchestrator import settings

    page = settings.with_readme_block(f"{settings.README_START}\n{settings.README_END}\n")
    rows = settings_table(page)
    assert rows == [s.name for s in settings.SETTINGS]
    dropped = page.replace(f"| `{rows[0]}` |", "| dropped |", 1)
    assert rows[0] not in settings_table(dropped)
    extra = page.replace(settings.README_END, f"| `DLRUN_NOT_DECLARED` | — | x |\n{settings.README_END}")
    assert "DLRUN_NOT_DECLARED" in settings_table(extra)


# --- exit codes ----------------------------------------------------------------------------------------

EXIT_PAGE = DOCS / "exit-codes.md"
CODE_ROW = re.compile(r"^\|\s*(\d+)\s*\|", re.M)


def declared_exit_codes() -> dict[int, str]:
    """Every exit code the code declares, with where: errors.py's EXIT_* constants and each error class's
    exit_code, the code per final job status (states.py), and a job's own code on a preemption notice."""
    from jobs import notice
    from orchestrator import errors, states

    codes: dict[int, str] = {}
    for name, value in vars(errors).items():
        if name.startswith("EXIT_") and isinstance(value, int):
            codes.setdefault(value, f"errors.{name}")
        if inspect.isclass(value) and issubclass(value, errors.DlrunError):
            codes.setdefault(value.exit_code, f"errors.{name}.exit_code")
    for status, value in states.EXIT_BY_STATUS.items():
        codes.setdefault(value, f"states.EXIT_BY_STATUS[{status}]")
    for ending in states.Ending:
        codes.setdefault(ending.exit_code(), f"states.{ending}.exit_code()")
        codes.setdefault(ending.exit_code(sigterm=True), f"states.{ending}.exit_code(sigterm=True)")
    codes.setdefault(notice.NOTICE_EXIT, "jobs.notice.NOTICE_EXIT")
    return codes


def test_every_exit_code_the_code_declares_is_on_the_exit_code_page():
    declared = declared_exit_codes()
    assert {0, 1, 2, 143} <= set(declared), "the codes are no longer found where this test reads them"
    on_page = {int(c) for c in CODE_ROW.findall(EXIT_PAGE.read_text())}
    assert {c: where for c, where in declared.items() if c not in on_page} == {}
    assert sorted(on_page - set(declared)) == [], "on docs/exit-codes.md but used nowhere"


def test_a_missing_exit_code_row_is_found():
    text = EXIT_PAGE.read_text()
    without = re.sub(r"^\|\s*143\s*\|.*\n", "", text, flags=re.M)
    assert without != text
    assert 143 not in {int(c) for c in CODE_ROW.findall(without)}


# --- the job file's fields -----------------------------------------------------------------------------

JOB_FILE_PAGE = DOCS / "job-file.md"


def schema_fields() -> list[str]:
    """Every field of the job file, dotted (`resources.spot`), from `dlrun schema`'s output: the leaves; a
    section (`resources`) is documented by its fields."""
    from orchestrator.cli.main import cli

    result = CliRunner().invoke(cli, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    defs = schema.get("$defs", {})

    def resolve(node: dict) -> dict | None:
        """The object a property holds (through $ref and anyOf with null), or None for a plain value."""
        if "$ref" in node:
            return resolve(defs[node["$ref"].rsplit("/", 1)[-1]])
        for option in node.get("anyOf", []):
            found = resolve(option)
            if found is not None:
                return found
        return node if node.get("type") == "object" and "properties" in node else None

    def walk(node: dict, prefix: str) -> list[str]:
        out = []
        for name, prop in node["properties"].items():
            inner = resolve(prop)
            out += [prefix + name] if inner is None else walk(inner, f"{prefix}{name}.")
        return out

    return walk(schema, "")


def documented_fields(text: str) -> set[str]:
    return set(re.findall(r"^\|\s*`([a-z0-9_.]+)`\s*\|", text, re.M))


def test_every_job_file_field_is_on_the_job_file_page():
    fields = schema_fields()
    assert {"name", "resources.accelerators", "workload.batch_size"} <= set(fields)
    documented = documented_fields(JOB_FILE_PAGE.read_text())
    assert [f for f in fields if f not in documented] == []
    # a section is documented by its fields; anything else in the table is no field at all
    sections = {f.rsplit(".", 1)[0] for f in fields if "." in f}
    assert sorted(documented - set(fields) - sections) == []


# --- README's tour -------------------------------------------------------------------------------------


def readme_section(title: str) -> str:
    text = README.read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"README has no '## {title}' section"
    return m[1]


def tour_commands() -> list[list[str]]:
    """The command path of each `dlrun ...` in README's tour (`schedule add`, `catalog refresh`, `plan`)."""
    from orchestrator.cli.main import cli

    paths = []
    ctx = click.Context(cli)
    for line in readme_section("A short tour").splitlines():
        code = line.strip().split("  #", 1)[0]
        if not code.startswith("dlrun "):
            continue
        for part in re.split(r"\s[|;]\s", code):  # `dlrun catalog ... | dlrun catalog refresh ; dlrun scheduler`
            group: click.Command = cli
            path: list[str] = []
            for word in shlex.split(part)[1:]:
                if not isinstance(group, click.Group) or word.startswith("-"):
                    break  # past the command: its arguments and options
                path.append(word)  # a word the group does not know stays: its --help then fails
                sub = group.get_command(ctx, word)
                if sub is None:
                    break
                group = sub
            paths.append(path)
    return paths


def test_the_readme_starts_with_the_two_commands_and_stays_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150
    first_block = readme_section("On a fresh machine").strip().splitlines()[:2]
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    assert "## On a fresh machine" == next(line for line in lines if line.startswith("## "))


def test_the_tour_shows_the_main_commands():
    shown = {p[0] for p in tour_commands() if p}
    assert {"plan", "submit", "status", "logs", "estimate", "schedule", "dashboard"} <= shown


@pytest.mark.parametrize("path", tour_commands(), ids=lambda p: " ".join(p) or "(none)")
def test_each_tour_command_exists(path):
    from orchestrator.cli.main import cli

    assert path, "a tour line names no command"
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, f"dlrun {' '.join(path)} --help: {result.output}"
    assert f" {' '.join(path)} [OPTIONS]" in result.output.splitlines()[0], result.output


def test_a_command_the_cli_does_not_have_fails_its_help():
    from orchestrator.cli.main import cli

    result = CliRunner().invoke(cli, ["no-such-command", "--help"])
    assert result.exit_code == 2 and "No such command" in result.output
    result = CliRunner().invoke(cli, ["schedule", "no-such-command", "--help"])
    assert result.exit_code == 2 and "No such command" in result.output
