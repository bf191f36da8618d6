"""Where dlrun keeps its files: $DLRUN_HOME (default ~/.dlrun). Resolved here and nowhere else."""
from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "DLRUN_HOME"


def dlrun_home() -> Path:
    """$DLRUN_HOME (default ~/.dlrun), created on first use."""
    home = Path(os.environ.get(HOME_ENV) or Path.home() / ".dlrun").expanduser()
    home.mkdir(parents=True, exist_ok=True)
    return home


def keys_dir() -> Path:
    """Per-cluster SSH keys (0700)."""
    d = dlrun_home() / "keys"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d


def spot_prices_path() -> Path:
    """Fresher spot prices written by `dlrun catalog refresh`, applied over the shipped catalog."""
    return dlrun_home() / "spot_prices.csv"


def refresh_dir() -> Path:
    """What `dlrun catalog refresh` and the plan read from the clouds' APIs (infra/refresh/cache.py)."""
    d = dlrun_home() / "catalog"
    d.mkdir(parents=True, exist_ok=True)
    return d
