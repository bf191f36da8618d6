"""The end-to-end tier: real Ray heads (local submit, scheduler, monitoring, team clusters, the framework
scripts), the emulated-VM lab and the browser; minutes."""
from pathlib import Path

from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, Path(__file__).parent, "e2e")
