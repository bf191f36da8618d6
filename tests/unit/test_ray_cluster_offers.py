"""A team cluster's settings and offers (infra/ray_cluster), from node resources as Ray's state API gives
them: which GPU counts are offered, at what rate, when a job waits, when the cluster can never hold it."""
import pytest

from infra.ray_cluster.offers import cluster_offers, never_fits, wait_note, wished_offer
from infra.ray_cluster.resources import NodeResources, gpu_name
from infra.ray_cluster.settings import ClusterConfigError, parse_clusters


def settings(**over):
    entry = {"address": "http://ray-head:8265/", "token_file": "/t", "price_per_gpu_hour": 1.5,
             "price_per_cpu_hour": 0.02, **over}
    return parse_clusters({"lab": entry}, "config.yaml")["lab"]


NODES = [NodeResources("h", True, cpus=4, gpus=0, gpu_type=None, memory_gb=16, used_cpus=1, used_gpus=0),
         NodeResources("a", False, cpus=32, gpus=8, gpu_type="A100", memory_gb=512, ray_gpu_type="A100",
                       used_cpus=0, used_gpus=6),
         NodeResources("b", False, cpus=8, gpus=2, gpu_type="A100", memory_gb=64, ray_gpu_type="A100",
                       used_cpus=0, used_gpus=0)]


def offers(**over):
    return cluster_offers(settings(**over), NODES, {"A100": "A100"})


def test_one_offer_per_gpu_count_a_node_holds_and_one_cpu_offer_at_the_teams_rates():
    got = {o.instance_type: o for o in offers()}
    assert set(got) == {"gpus-1", "gpus-2", "gpus-4", "gpus-8", "cpus-32"}
    four = got["gpus-4"]
    assert four.cloud == "cluster:lab" and four.accelerator == "A100" and four.accelerator_count == 4
    assert four.price_per_hour == pytest.approx(6.0) and four.gpu_memory_gb == 40 and four.vcpus == 16
    assert got["cpus-32"].price_per_hour == pytest.approx(0.64) and got["cpus-32"].accelerator is None
    assert {o.instance_type for o in offers(max_gpus=3)} == {"gpus-1", "gpus-2", "gpus-3", "cpus-32"}


def test_busy_gpus_make_it_wait_and_a_job_too_large_never_fits():
    got = {o.instance_type: o for o in offers()}
    assert wait_note(got["gpus-2"], 1) is None  # node b has both free
    assert wait_note(got["gpus-4"], 1) == "waits: 2 A100 busy"  # only node a holds 4; 6 of 8 busy
    assert never_fits(got["gpus-2"], 2) is None  # two nodes hold 2 each
    assert never_fits(got["gpus-4"], 2) == ("cluster lab can never hold 2×4×A100: its largest A100 node has 8, "
                                            "1 node(s) hold 4")
    sixteen = wished_offer(got["gpus-1"], 16)
    assert sixteen.price_per_hour == pytest.approx(24.0)
    assert never_fits(sixteen, 1) == "cluster lab can never hold 1×16×A100: its largest A100 node has 8"
    capped = {o.instance_type: o for o in offers(max_gpus=4)}
    assert never_fits(capped["gpus-4"], 2) == "cluster lab lets dlrun use at most 4 GPUs (max_gpus); the job needs 8"


def test_unknown_usage_says_nothing_about_waiting():
    nodes = [NodeResources("a", False, cpus=8, gpus=2, gpu_type="T4", memory_gb=32, ray_gpu_type="T4")]
    two = next(o for o in cluster_offers(settings(), nodes, {"T4": "T4"}) if o.accelerator_count == 2)
    assert two.extra["free_now"] is None and wait_note(two, 1) is None


def test_rays_accelerator_names_map_onto_the_catalogs():
    assert gpu_name("A100") == "A100" and gpu_name("T4") == "T4"
    assert gpu_name("A100-80G") == "A100-80GB" and gpu_name("A100-40G") == "A100"
    assert gpu_name("Made-Up-9000") == "Made-Up-9000"  # kept: the planner excludes it as unknown


@pytest.mark.parametrize("entry,says", [
    ({"address": "ray-head:8265"}, "clusters.lab.address: expected the dashboard URL"),
    ({"address": "http://h:8265", "price_per_gpu_hour": -1}, "clusters.lab.price_per_gpu_hour"),
    ({"address": "http://h:8265", "max_gpus": 2.5}, "clusters.lab.max_gpus"),
    ({"address": "http://h:8265", "token": "abc"}, "unknown key token"),
    ({"address": "http://h:8265", "shared_path": "rel/dir"}, "clusters.lab.shared_path"),
])
def test_a_wrong_entry_is_one_line_naming_the_key(entry, says):
    with pytest.raises(ClusterConfigError, match=says.replace(".", r"\.")):
        parse_clusters({"lab": entry}, "config.yaml")


def test_the_token_is_read_from_its_file_each_time_and_never_kept(tmp_path):
    from infra.base import CredentialsError

    token = tmp_path / "token"
    s = settings(token_file=str(token))
    with pytest.raises(CredentialsError, match="cannot read its token file"):
        s.headers()
    token.write_text("first\n")
    assert s.headers() == {"Authorization": "Bearer first"}
    token.write_text("rotated")
    assert s.headers() == {"Authorization": "Bearer rotated"} and "rotated" not in repr(s)
