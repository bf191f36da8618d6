"""The machine profiles dlrun measures once per machine, shared by a test's $DLRUN_HOME."""
from pathlib import Path


def share_profiles(home: Path, machine_profiles: Path) -> None:
    """$DLRUN_HOME/profiles of `home` is the session's shared directory."""
    (home / "profiles").symlink_to(machine_profiles, target_is_directory=True)
