"""`make test` ends with one line that counts the tests skipped for a missing system package, names the
packages and the command that installs them (tests/conftest.py's pytest_terminal_summary), read from a
real pytest run (pytester, in a subprocess) of a small generated suite using tests/conftest.py as is."""
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
    result.assert_outcomes(passed=1, skipped=6)
    lines = result.outlines
    summary = lines.index("4 tests skipped for a missing system package (chromium, chromium-driver, openssh-client, "
                          "iproute2, mmdebstrap, prometheus): install with `sudo apt-get install -y chromium "
                          "chromium-driver openssh-client iproute2 mmdebstrap prometheus` and run `make test` again")
    assert lines[summary + 1] == "1 test skipped for lack of root (the emulated-VM lab): run `sudo make test`"
    # after the `-ra` list, right before the totals: the last thing read
    assert any(line.startswith("SKIPPED") for line in lines[:summary])
    assert "1 passed, 6 skipped" in lines[summary + 2] and summary + 3 == len(lines)


def test_no_line_when_nothing_was_skipped_for_a_package(pytester, monkeypatch):
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
