"""`dlrun catalog --gpu`: a GPU of dlrun's table that no cloud offers, or not in the count asked, is said as such
(RTX4090 is not 'RT × 4090', nor an unknown GPU listed among the known ones); a typo gets the nearest names."""
from orchestrator.cli import plan as cli_plan
from tests.support.cli import invoke


def test_a_known_gpu_no_cloud_offers():
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "RTX4090"])
    assert code == 0 and result.stderr.startswith("no catalog offer has GPU RTX4090; RTX4090 is in dlrun's GPU "
                                                  "table, but no cloud of the catalog offers it")


def test_a_count_the_gpu_does_not_come_in():
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "T4x8", "--cloud", "gcp"])
    assert code == 0 and "; T4 comes as 1×T4, 2×T4, 4×T4, not 8×T4" in result.stderr


def test_a_typo_gets_the_nearest_names():
    code, result = invoke(cli_plan.catalog_group, ["--gpu", "RTX409"])
    assert code == 2 and str(result.exception).startswith("--gpu: unknown GPU 'RTX409'; did you mean RTX4090")
