"""The cost tiers of tests/: each tier's conftest.py marks the tests under its own folder (a conftest's
pytest_collection_modifyitems sees every collected test, not only its folder's)."""
from __future__ import annotations

from pathlib import Path

import pytest


def mark_folder(items: list[pytest.Item], folder: Path, marker: str) -> None:
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(marker)
