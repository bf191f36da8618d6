"""How long `dlrun catalog refresh` takes for both clouds, every region, against the fakes at realistic
volumes (tests/support/catalog_world.py: 40 GCP regions and thousands of billing SKUs; every EC2 region moto
knows, its instance types and offerings, thousands of Price List items; a seeded spot history).
Goal (issue 25): <= 60 s here. Also: a second refresh (everything fresh) and a plan on the result.

    .venv/bin/python bench/catalog_refresh.py [--gcp-regions 40] [--aws-others 300]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gcp-regions", type=int, default=40)
    ap.add_argument("--aws-others", type=int, default=300, help="non-GPU price items per AWS region besides the planned ones")
    args = ap.parse_args()
    os.environ.update(DLRUN_HOME=tempfile.mkdtemp(prefix="dlrun-bench-"), AWS_ACCESS_KEY_ID="bench",
                      AWS_SECRET_ACCESS_KEY="bench", GOOGLE_CLOUD_PROJECT="dlrun-test", AWS_DEFAULT_REGION="us-east-1")
    import boto3
    import pytest
    from moto import mock_aws

    from tests.support.aws_api_server import AwsApis
    from tests.support.catalog_world import (aws_price_items, aws_types, gcp_world, seed_spot_history,
                                           spot_history)

    t0 = time.time()
    gce, billing = gcp_world(args.gcp_regions)
    aws = AwsApis()
    mp = pytest.MonkeyPatch()
    with mock_aws(), gce, billing, aws:
        ec2 = boto3.client("ec2", region_name="us-east-1")
        regions = sorted(r["RegionName"] for r in ec2.describe_regions()["Regions"])
        types = aws_types(ec2)
        zones = {r: [f"{r}{c}" for c in "abc"] for r in regions}
        aws.price_items = aws_price_items(types, regions, args.aws_others)
        seed_spot_history(mp, spot_history(types, regions, zones))
        os.environ.update(AWS_ENDPOINT_URL_PRICING=aws.endpoint, AWS_ENDPOINT_URL_SERVICE_QUOTAS=aws.endpoint,
                          DLRUN_GCP_API_ENDPOINT=gce.endpoint, DLRUN_LOCAL_GPUS="none",
                          DLRUN_GCP_BILLING_ENDPOINT=billing.endpoint)
        setup = time.time() - t0
        print(f"fakes: {len(regions)} AWS regions, {len(aws.price_items)} price items; {len(gce.regions)} GCP regions, "
              f"{len(billing.skus)} SKUs, {sum(len(v) for v in gce.machine_types.values())} machine types "
              f"(built in {setup:.1f} s)")
        from orchestrator.planning.catalog_refresh import refresh_catalog

        t = time.time()
        report = refresh_catalog(max_age={}, progress=lambda line: print(" ", line))
        full = time.time() - t
        failed = report.failed
        print(f"full refresh, both clouds: {full:.1f} s -> {report.offers} offers "
              f"(aws {report.regions.get('aws', 0)} regions, gcp {report.regions.get('gcp', 0)} regions); "
              f"{len(report.results)} sources, {len(failed)} failed (goal <= 60 s: {'met' if full <= 60 else 'MISSED'})")
        for r in failed[:5]:
            print("  ", r.line())
        t = time.time()
        again = refresh_catalog(progress=None)
        print(f"second refresh (everything within its lifetime): {time.time() - t:.2f} s, "
              f"{sum(r.status == 'fetched' for r in again.results)} sources fetched")
        from infra.catalog import load_offers

        t = time.time()
        offers = load_offers()
        print(f"load_offers after the refresh: {len(offers)} offers in {time.time() - t:.2f} s")
        from configs import EXAMPLES_DIR
        from orchestrator.planning.planner import plan_job
        from orchestrator.planning.spec import load_job

        spec = load_job(EXAMPLES_DIR / "digits_cnn.yaml")
        plan_job(spec, offers=[], progress=lambda line: None)  # profiles the model once
        for label in ("first plan (reads quotas in every region)", "second plan (quotas cached)"):
            t = time.time()
            p = plan_job(spec, quota_max_age_s=None, progress=lambda line: None)
            print(f"{label}: {time.time() - t:.1f} s, {len(p.candidates)} candidates, chosen "
                  f"{p.chosen.offer.label if p.chosen else None}")
    mp.undo()


if __name__ == "__main__":
    main()
