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


def start_head(tmp_path_factory):
    """A real Ray head started the way dlrun starts it (own process group). A token left in ~/.ray by
    any earlier local ray.init() must not lock dlrun out of its own head: the head starts with one."""
    from infra.local import head as raycluster

    home = tmp_path_factory.mktemp("head-home")
    user_home = tmp_path_factory.mktemp("user-home")
    (user_home / ".ray").mkdir()
    (user_home / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)
    saved = {k: os.environ.get(k) for k in ("DLRUN_HOME", "HOME", "RAY_AUTH_MODE")}
    os.environ.update(DLRUN_HOME=str(home), HOME=str(user_home))
    os.environ.pop("RAY_AUTH_MODE", None)
    try:
        return raycluster.start_local_head(dashboard_port=raycluster.free_port(), num_cpus=2)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One real Ray head for the session, with token auth like every head dlrun starts. Clients reach
    it as a user reaches a head dlrun did not start (DLRUN_RAY_ADDRESS): with Ray's own token settings
    in the environment (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH)."""
    from infra.local import head as raycluster

    head = start_head(tmp_path_factory)
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=head.token_path)
    yield head
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    raycluster.stop_local_head(head)
