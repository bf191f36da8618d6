"""`make test` ends with one line that counts the tests skipped for a missing system package, names the
packages and the command that installs them, one for lack of root, and one per other reason with its count
(tests/conftest.py's pytest_terminal_summary), read from a real pytest run (pytester, in a subprocess) of a
small generated suite using tests/conftest.py as is."""
import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
CONFTEST = (ROOT / "tests" / "conftest.py").read_text()

# the skip forms the suite uses: pytest.skip in a fixture (tests/support/vm/fixtures.py), a module's
# skipif mark (the e2e VM tests), pytest.skip in a test (the browser and Prometheus tests)
SUITE = {
    "test_lab.py": """
        import pytest

        @pytest.fixture
        def lab():
            pytest.skip("the VM lab needs ssh, ip: apt-get install -y openssh-client iproute2 mmdebstrap")

        def test_one(lab):
            pass

        def test_two(lab):
            pass
    """,
    "test_browser.py": """
        import pytest

        pytestmark = pytest.mark.skipif(True, reason="headless Chromium is not installed (Debian: apt-get "
                                        "install chromium chromium-driver; found browser=None, chromedriver=None)")

        def test_page():
            pass
    """,
    "test_other.py": """
        import pytest

        def test_metrics():
            pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")

        def test_root():
            pytest.skip("needs root (mount and PID namespaces, overlayfs, chroot)")

        def test_offline():
            pytest.skip("the VM lab's package index is downloaded from PyPI once, which is unreachable")

        def test_offline_too():
            pytest.skip("the VM lab's package index is downloaded from PyPI once, which is unreachable")

        def test_runtime():
            pytest.skip("`podman info` fails here: cgroups refused")

        def test_runs():
            assert 1 + 1 == 2
    """,
}


@pytest.fixture
def suite(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**SUITE)
    return pytester


def test_the_run_ends_with_the_count_the_packages_and_the_install_command(suite):
    result = suite.runpytest_subprocess("-q", "-ra", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=8)
    lines = result.outlines
    summary = lines.index("4 tests skipped for a missing system package (chromium, chromium-driver, openssh-client, "
                          "iproute2, mmdebstrap, prometheus): install with `sudo apt-get install -y chromium "
                          "chromium-driver openssh-client iproute2 mmdebstrap prometheus` and run `make test` again")
    assert lines[summary + 1] == "1 test skipped for lack of root (the emulated-VM lab): run `sudo make test`"
    # every other reason counted, the most frequent first: an unreachable lab does not pass unnoticed
    assert lines[summary + 2: summary + 5] == [
        "3 tests skipped for another reason:",
        "  2 x the VM lab's package index is downloaded from PyPI once, which is unreachable",
        "  1 x `podman info` fails here: cgroups refused"]
    # after the `-ra` list, right before the totals: the last thing read; the time by tier just above
    assert any(line.startswith("SKIPPED") for line in lines[:summary])
    assert lines[summary - 1].startswith("time by tier: unmarked ") and lines[summary - 1].endswith("(9 tests)")
    assert "1 passed, 8 skipped" in lines[summary + 5] and summary + 6 == len(lines)


def test_no_package_or_root_line_when_nothing_was_skipped_for_them(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_plain="""
        import pytest

        def test_offline():
            pytest.skip("the VM lab's package index is downloaded from PyPI once, which is unreachable")
    """)
    result = pytester.runpytest_subprocess("-q", "-ra", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    assert not [line for line in result.outlines if "missing system package" in line or "lack of root" in line]
    assert "1 test skipped for another reason:" in result.outlines


def test_the_run_ends_with_the_time_of_each_tier(pytester, monkeypatch):
    """Setup, call and teardown of each test summed per tier mark (the marks the tier folders' conftest.py set)."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(CONFTEST)
    pytester.makeini("[pytest]\nmarkers =\n    unit\n    integration\n    e2e\n")
    pytester.makepyfile(test_tiers="""
        import time

        import pytest

        @pytest.fixture
        def slow_setup():
            time.sleep(1.0)

        @pytest.mark.e2e
        def test_slow(slow_setup):
            time.sleep(1.0)

        @pytest.mark.e2e
        def test_failing():
            assert False

        @pytest.mark.unit
        def test_fast():
            pass

        @pytest.mark.unit
        def test_skipped():
            pytest.skip("not here")
    """)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    (line,) = [line for line in result.outlines if line.startswith("time by tier: ")]
    found = re.fullmatch(r"time by tier: unit (\d+\.\d) s \(2 tests\), e2e (\d+\.\d) s \(2 tests\)", line)
    assert found, line
    # the e2e fixture's and test's sleeps are in e2e's sum, nothing of them in unit's (its tests do nothing)
    assert float(found[1]) < 1.0 and float(found[2]) >= 2.0, line
