"""The shipped catalog: coverage, GCP host + GPU price parts, dates, GPU specs, spot overrides."""
import csv

from infra.catalog import canonical_gpu, gpu_names, gpu_spec, load_offers


def test_catalog_covers_the_gpus_users_ask_for_in_both_clouds_and_several_regions():
    offers = load_offers()
    for gpu in ("K80", "T4", "V100", "A10G", "L4", "A100", "H100"):
        assert any(o.accelerator == gpu for o in offers), gpu
    for cloud in ("aws", "gcp"):
        assert len({o.region for o in offers if o.cloud == cloud}) >= 3
    assert all(o.price_date and o.source for o in offers)
    assert all(gpu_spec(o.accelerator) for o in offers if o.accelerator)  # CPU rows have none


def test_gcp_price_is_host_plus_gpu():
    gcp = [o for o in load_offers() if o.cloud == "gcp" and o.accelerator]  # CPU VMs have no GPU part
    assert gcp
    for o in gcp:
        assert abs(o.price_per_hour - (o.host_price_per_hour + o.gpu_price_per_hour)) < 0.01, o.key
        if o.spot_price_per_hour is not None:
            assert abs(o.spot_price_per_hour - (o.host_spot_price_per_hour + o.gpu_spot_price_per_hour)) < 0.01


def test_cpu_instances_are_complete_and_cover_every_gpu_region():
    offers = load_offers()
    cpu = [o for o in offers if not o.accelerator]
    assert {o.cloud for o in cpu} == {"aws", "gcp"}
    for o in cpu:
        assert o.accelerator_count == 0 and o.gpu_memory_gb == 0, o.key
        assert o.vcpus > 0 and o.memory_gb > 0, o.key
        assert o.price_per_hour > 0 and o.price_date and o.source, o.key
        assert o.spot_price_per_hour is None or 0 < o.spot_price_per_hour < o.price_per_hour, o.key
    # a small job can be planned onto a CPU VM in any region the catalog offers GPUs in
    for cloud in ("aws", "gcp"):
        gpu_regions = {o.region for o in offers if o.cloud == cloud and o.accelerator}
        cpu_regions = {o.region for o in cpu if o.cloud == cloud}
        assert gpu_regions <= cpu_regions, (cloud, gpu_regions - cpu_regions)
    assert any(o.price_per_hour <= 0.10 for o in cpu)  # cheap enough for a tiny CNN


def test_gpu_specs_have_what_the_roofline_needs():
    for name in gpu_names():
        g = gpu_spec(name)
        assert g.memory_gb > 0 and g.memory_bandwidth_gbps > 0 and g.fp32_tflops > 0 and g.host_link_gbps > 0
        assert g.peak_tflops("fp16") >= g.fp32_tflops and g.sm_count > 0 and g.boost_clock_mhz > 0
        assert g.peak_tflops("bf16") >= g.peak_tflops("tf32") >= g.fp32_tflops or not g.has_tf32
    assert canonical_gpu("v100-16gb") == "V100" and canonical_gpu("nope") is None
    assert gpu_spec("T4").peak_tflops("bf16") == gpu_spec("T4").fp32_tflops  # no bf16 on Turing
    assert not gpu_spec("V100").has_tf32 and gpu_spec("A100").has_tf32  # TF32 from Ampere on


def test_refreshed_spot_prices_override_with_their_own_date(dlrun_home):
    with open(dlrun_home / "spot_prices.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["cloud", "region", "instance_type", "spot_price_per_hour", "price_date"])
        w.writerow(["aws", "us-east-1", "p3.2xlarge", "0.99", "2026-02-03"])
    o = next(o for o in load_offers() if o.key == "aws/us-east-1/p3.2xlarge")
    assert (o.spot_price_per_hour, o.spot_price_date, o.price_date) == (0.99, "2026-02-03", "2025-07-01")
