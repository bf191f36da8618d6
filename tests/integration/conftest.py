"""The integration tier: real clients against stand-ins (moto, the fake GCE/GCS/metadata/billing HTTP
servers, HTTP/websocket stand-ins), the node scripts run by bash, dlrun's CLI in a subprocess; no Ray head."""
from pathlib import Path

from tests.support.tiers import mark_folder


def pytest_collection_modifyitems(items):
    mark_folder(items, Path(__file__).parent, "integration")
