import collections
import os
import re

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# no test may reach a real cloud: make sure no real credentials are picked up
for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS"):
    os.environ.pop(var, None)


# A test that cannot run for want of a system package says so in its skip reason with the command that
# installs it, "apt-get install [-y] PKG ...", the packages last or followed by ';', ')' or ','; a test that
# needs root says "needs root". After the run, one line each counts them and says what to do: among a few
# hundred `-ra` lines a newcomer would not see that the emulated-VM half was not tested. Every other skip is
# counted too, one line per reason (a lab whose mirror was "unreachable", a runtime that does not work here):
# no skip passes unnoticed.
APT_INSTALL = re.compile(r"apt-get install (?:-y )?([a-z0-9][a-z0-9.+-]*(?: [a-z0-9][a-z0-9.+-]*)*)")


def skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


# The time by cost tier (the marks the tier folders' conftest.py set): setup, call and teardown of each test summed,
# printed at the end of every run, so `make test` shows where its minutes go without --durations.
TIERS = ("unit", "integration", "e2e")


def tier_times(stats: dict) -> dict[str, tuple[float, int]]:
    """{tier: (seconds, tests)} from the terminal reporter's reports (every phase of every test is kept there)."""
    seconds: dict[str, float] = {}
    tests: dict[str, set[str]] = {}
    for reports in stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            tier = next((t for t in TIERS if t in report.keywords), "unmarked")
            seconds[tier] = seconds.get(tier, 0.0) + report.duration
            tests.setdefault(tier, set()).add(report.nodeid)
    return {t: (seconds[t], len(tests[t])) for t in (*TIERS, "unmarked") if t in seconds}


def tier_line(times: dict[str, tuple[float, int]]) -> str:
    def clock(s: float) -> str:
        return f"{s:.1f} s" if s < 60 else f"{int(s // 60)}:{int(s % 60):02d}"
    return "time by tier: " + ", ".join(f"{tier} {clock(s)} ({n} test{'s' if n != 1 else ''})"
                                        for tier, (s, n) in times.items())


@pytest.hookimpl(wrapper=True, tryfirst=True)  # the outermost wrapper: after the `-ra` list, last but the totals
def pytest_terminal_summary(terminalreporter):
    result = yield
    times = tier_times(terminalreporter.stats)
    if times:
        terminalreporter.write_line(tier_line(times), bold=True)
    reasons = [skip_reason(r) for r in terminalreporter.stats.get("skipped", [])]
    packages: dict[str, None] = {}
    for_packages = 0
    for reason in reasons:
        found = APT_INSTALL.search(reason)
        if found:
            for_packages += 1
            packages.update(dict.fromkeys(found[1].split()))
    if for_packages:
        names = " ".join(packages)
        terminalreporter.write_line(
            f"{for_packages} test{'s' if for_packages > 1 else ''} skipped for a missing system package "
            f"({', '.join(packages)}): install with `sudo apt-get install -y {names}` and run `make test` again",
            yellow=True, bold=True)
    for_root = sum("needs root" in reason for reason in reasons)
    if for_root:
        terminalreporter.write_line(f"{for_root} test{'s' if for_root > 1 else ''} skipped for lack of root "
                                    "(the emulated-VM lab): run `sudo make test`", yellow=True, bold=True)
    others = collections.Counter(reason.removeprefix("Skipped: ") for reason in reasons
                                 if not APT_INSTALL.search(reason) and "needs root" not in reason)
    if others:
        count = sum(others.values())
        terminalreporter.write_line(f"{count} test{'s' if count > 1 else ''} skipped for another reason:",
                                    yellow=True, bold=True)
        for reason, n in others.most_common():
            terminalreporter.write_line(f"  {n} x {reason}", yellow=True)
    return result


@pytest.fixture(autouse=True)
def dlrun_home(tmp_path, monkeypatch):
    """Every test gets its own $DLRUN_HOME (state.db, keys, caches)."""
    home = tmp_path / "dlrun-home"
    home.mkdir()
    monkeypatch.setenv("DLRUN_HOME", str(home))
    return home
