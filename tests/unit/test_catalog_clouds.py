"""`dlrun catalog --cloud` offers the clouds the catalog refresher reads (its name list is kept light for --help)."""
from __future__ import annotations


def test_catalog_commands_offer_the_clouds_the_refresher_knows():
    from orchestrator.cli.plan import CATALOG_CLOUDS
    from orchestrator.planning.catalog_refresh import KINDS

    assert CATALOG_CLOUDS == tuple(KINDS)


def test_every_cloud_dlrun_provisions_has_price_and_quota_sources():
    from infra import BACKENDS
    from infra.refresh.sources import SOURCES

    provisioned = {name for name, (_, caps) in BACKENDS.items() if caps.remote and caps.provisioned}
    assert set(SOURCES) == provisioned


def test_gcp_reads_its_project_quotas_and_all_stale_regions_in_one_call_each_aws_one_call_per_region():
    from infra.refresh.quotas import GLOBAL
    from infra.refresh.sources import SOURCES

    assert GLOBAL in SOURCES["gcp"].quota_units and not SOURCES["aws"].quota_units
    assert len(SOURCES["gcp"].quota_reads(object(), [GLOBAL, "us-central1", "europe-west4"])) == 2
    assert len(SOURCES["gcp"].quota_reads(object(), ["us-central1"])) == 1
    assert len(SOURCES["aws"].quota_reads(object(), ["us-east-1", "us-west-2"])) == 2


def test_the_refresher_reads_prices_of_every_cloud_with_sources():
    from infra.refresh.sources import SOURCES
    from orchestrator.planning.catalog_refresh import CLOUD_READS

    assert list(CLOUD_READS) == list(SOURCES)
