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
# hundred `-ra` lines a newcomer would not see that the emulated-VM half was not tested.
APT_INSTALL = re.compile(r"apt-get install (?:-y )?([a-z0-9][a-z0-9.+-]*(?: [a-z0-9][a-z0-9.+-]*)*)")


def skip_reason(report) -> str:
    longrepr = report.longrepr
    return longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)


@pytest.hookimpl(wrapper=True, tryfirst=True)  # the outermost wrapper: after the `-ra` list, last but the totals
def pytest_terminal_summary(terminalreporter):
    result = yield
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
    return result


@pytest.fixture(autouse=True)
def dlrun_home(tmp_path, monkeypatch):
    """Every test gets its own $DLRUN_HOME (state.db, keys, caches)."""
    home = tmp_path / "dlrun-home"
    home.mkdir()
    monkeypatch.setenv("DLRUN_HOME", str(home))
    return home
