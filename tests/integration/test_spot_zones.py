"""Per-zone spot prices: the launch under moto tries zones in the order the estimate priced them, and
`dlrun catalog refresh` keeps every zone (an outlier zone does not set the region's price)."""

import pytest
from moto import mock_aws

from infra.base import CapacityError
from infra.spot_zones import ZonePrice, launch_order, rank
from tests.support.aws_faults import fail_run_instances
from tests.support.aws_images import seed_image_parameters
from tests.support.aws_moto import REGION, aws_env, make_provider, make_request, offer  # noqa: F401  (fixtures)


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


