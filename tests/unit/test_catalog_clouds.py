"""`dlrun catalog --cloud` offers the clouds the catalog refresher reads (its name list is kept light for --help)."""
from __future__ import annotations


def test_catalog_commands_offer_the_clouds_the_refresher_knows():
    from orchestrator.cli.plan import CATALOG_CLOUDS
    from orchestrator.planning.catalog_refresh import KINDS

    assert CATALOG_CLOUDS == tuple(KINDS)
