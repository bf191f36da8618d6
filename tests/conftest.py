import os

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# no test may reach a real cloud: make sure no real credentials are picked up
for var in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
            "GOOGLE_APPLICATION_CREDENTIALS"):
    os.environ.pop(var, None)


@pytest.fixture(autouse=True)
def dlrun_home(tmp_path, monkeypatch):
    """Every test gets its own $DLRUN_HOME (state.db, keys, caches)."""
    home = tmp_path / "dlrun-home"
    home.mkdir()
    monkeypatch.setenv("DLRUN_HOME", str(home))
    return home
