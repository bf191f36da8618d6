"""Per-zone spot prices: the launch under moto tries zones in the order the estimate priced them, and
`dlrun catalog refresh` keeps every zone (an outlier zone does not set the region's price)."""
import csv

import pytest
from moto import mock_aws

from infra.base import CapacityError
from infra.spot_zones import ZonePrice, launch_order, rank
from tests.fakes.aws_faults import fail_run_instances
from tests.fakes.aws_images import seed_image_parameters
from tests.test_aws import REGION, aws_env, make_provider, make_request, offer  # noqa: F401  (fixtures)
from tests.test_cli_plan import _seed_spot_history, invoke


def test_rank_flags_a_zone_far_below_the_median_of_the_others():
    r = rank([ZonePrice("use1-az1", 2.4655), ZonePrice("use1-az2", 8.1915), ZonePrice("use1-az4", 8.1203),
              ZonePrice("use1-az6", 7.8799)])
    assert [z.zone for z in r.outliers] == ["use1-az1"] and r.launch_zone.zone == "use1-az6"
    assert [z.zone for z in r.order] == ["use1-az6", "use1-az4", "use1-az2", "use1-az1"]
    assert not rank([ZonePrice("a", 1.0), ZonePrice("b", 1.9)]).outliers  # 1.0 is not < 50 % of 1.9
    assert launch_order(["x-1a", "x-1b", "x-1c"], r, {"x-1a": "use1-az1", "x-1c": "use1-az6"}) == \
        ["x-1c", "x-1b", "x-1a"]  # priced regular zone, unpriced zone, outlier


def test_a_spot_launch_tries_the_priced_zone_first_and_the_outlier_last(aws_env):  # noqa: F811
    import boto3

    with mock_aws():
        seed_image_parameters()
        session = boto3.Session(region_name=REGION)
        fail_run_instances(session, "InsufficientInstanceCapacity")
        ids = {z["ZoneName"]: z["ZoneId"] for z in session.client("ec2").describe_availability_zones()["AvailabilityZones"]}
        request = make_request("p4d", spot=True)
        request.offer = offer("p4d.24xlarge")
        with pytest.raises(CapacityError) as err:
            make_provider(session).launch(request)
    tried = [part.split(":")[0].strip() for part in err.value.message.split("(", 1)[1].split(";")]
    assert [ids[z] for z in tried][:3] == ["use1-az6", "use1-az4", "use1-az2"]  # by price, as estimated
    assert ids[tried[-1]] == "use1-az1"  # the flagged zone last
    assert request.offer.spot_price_per_hour == pytest.approx(7.8799)  # the price of the first zone tried


def test_refresh_keeps_every_zone_and_prices_the_launch_zone(monkeypatch, dlrun_home):
    from infra.catalog import load_offers
    from orchestrator.cli import plan as cli_plan

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    rec = {"InstanceType": "p4d.24xlarge", "ProductDescription": "Linux/UNIX", "Timestamp": "2026-01-10T10:00:00Z"}
    _seed_spot_history(monkeypatch, [{**rec, "AvailabilityZone": "us-east-1a", "SpotPrice": "2.00"},
                                     {**rec, "AvailabilityZone": "us-east-1b", "SpotPrice": "8.00"},
                                     {**rec, "AvailabilityZone": "us-east-1c", "SpotPrice": "7.50"}])
    with mock_aws():
        code, result = invoke(cli_plan.catalog_group, ["refresh", "--region", "us-east-1"])
    assert code == 0, result.output
    with open(dlrun_home / "spot_zones.csv") as f:
        zones = {r["zone"]: float(r["spot_price_per_hour"]) for r in csv.DictReader(f)}
    assert zones == {"us-east-1a": 2.0, "us-east-1b": 8.0, "us-east-1c": 7.5}
    p4d = next(o for o in load_offers() if o.key == "aws/us-east-1/p4d.24xlarge")
    assert p4d.spot_price_per_hour == 7.5 and p4d.spot_price_date == "2026-01-10"
    assert [z.zone for z in p4d.extra["spot_zones"].outliers] == ["us-east-1a"]
