"""The GPU software compatibility table and the planner's use of it: per GPU generation the driver,
CUDA and torch wheel index chosen, retired families never planned, and the notes a plan carries."""
import datetime as dt
import json
import re

import pytest
import yaml
from click.testing import CliRunner

from infra import software as sw
from infra.catalog import gpu_names, load_offers
from orchestrator.planning import planner
from orchestrator.planning.software import job_torch, price_age_note
from orchestrator.planning.spec import parse_job
from tests.support.planning import synthetic

PROFILE = synthetic(flops=3e12, membytes=2e9, ops=300, steps=3000, state=6e9, act=5e9, local={"cpu": 2.0})

# (GPU, torch) -> wheel index, or the start of the reason it cannot run
EXPECTED = {
    ("K80", "1.12.1"): "cu113", ("K80", "2.13.0"): "K80 (sm_37): no torch 2.13 wheel supports it; "
                                                    "pin torch<=1.12 with CUDA 11 to plan it",
    ("M60", "2.13.0"): "cu126", ("P100", "2.13.0"): "cu126", ("P100", "2.8.0"): "cu126",
    ("V100", "2.8.0"): "cu128", ("V100", "2.11.0"): "cu126", ("V100", "2.13.0"): "cu126",
    ("T4", "2.5.1"): "cu118", ("T4", "2.8.0"): "cu128", ("T4", "2.13.0"): "cu130",
    ("A10G", "2.13.0"): "cu130", ("L4", "2.13.0"): "cu130", ("A100", "2.13.0"): "cu130",
    ("A100-80GB", "2.13.0"): "cu130", ("H100", "2.13.0"): "cu130",
    ("H100", "1.12.1"): "H100 (sm_90): no torch 1.12 wheel supports it; pin torch>=2.0 to plan it",
}


@pytest.mark.parametrize("gpu,torch", sorted(EXPECTED))
def test_wheel_index_per_gpu_generation(gpu, torch):
    want = EXPECTED[(gpu, torch)]
    if want.startswith("cu"):
        assert sw.choose_wheels(gpu, torch).index == want
    else:
        with pytest.raises(sw.Unsupported, match=want.replace("(", r"\(").replace(")", r"\)")):
            sw.choose_wheels(gpu, torch)


def test_every_catalog_gpu_has_a_generation_row_and_every_row_a_source():
    for name in gpu_names():
        gen = sw.generation(name)
        assert gen is not None and gen.compute_capability and gen.source, name
    gens, wheels, images, retired = sw.tables()
    for row in [*wheels, *images, *retired]:
        assert row.source.strip(), row


def test_a_newer_cuda_needs_a_driver_the_image_has():
    # cu130 needs R580: with an R570 image a T4 falls back to the CUDA 12.6 wheels of the same torch
    assert sw.choose_wheels("T4", "2.13.0", driver_branch=570).index == "cu126"
    assert sw.choose_wheels("T4", "2.13.0", driver_branch=580).index == "cu130"


@pytest.mark.parametrize("cloud,gpu,index,image", [
    ("aws", "T4", "cu130", "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"),
    ("aws", "A10G", "cu130", "base-oss-nvidia-driver-gpu-ubuntu-22.04"),
    ("aws", "H100", "cu130", "base-oss-nvidia-driver-gpu-ubuntu-22.04"),
    ("gcp", "V100", "cu126", "common-cu129-ubuntu-2204-nvidia-580"),
    ("gcp", "P100", "cu126", "common-cu129-ubuntu-2204-nvidia-580"),
    ("gcp", "L4", "cu130", "common-cu129-ubuntu-2204-nvidia-580"),
    ("aws", None, "cpu", "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"),
    ("gcp", None, "cpu", "ubuntu-os-cloud/global/images/family/ubuntu-2204-lts"),
])
def test_software_plan_per_cloud_and_generation(cloud, gpu, index, image):
    plan = sw.software_plan(cloud, gpu, "2.13.0", "torch==2.13.0")
    assert plan.wheel_index == index and image in plan.image
    assert plan.index_url == f"https://download.pytorch.org/whl/{index}"
    assert (plan.driver_branch == 580) == bool(gpu)


def test_the_aws_gpu_image_does_not_drive_volta():
    with pytest.raises(sw.Unsupported, match=r"V100 \(sm_70\): the aws GPU image"):
        sw.software_plan("aws", "V100", "2.13.0", "torch==2.13.0")


@pytest.mark.parametrize("cloud,instance,gpu,retired_on", [
    ("aws", "p2.xlarge", "K80", "2025-04-30"), ("aws", "p3.2xlarge", "V100", "2025-12-20"),
    ("aws", "p3dn.24xlarge", "V100-32GB", "2025-12-20"), ("gcp", "n1-standard-8", "K80", "2024-05-01"),
    ("aws", "g4dn.xlarge", "T4", None), ("aws", "p4d.24xlarge", "A100", None), ("gcp", "n1-standard-8", "V100", None),
])
def test_retired_families(cloud, instance, gpu, retired_on):
    r = sw.retirement(cloud, instance, gpu)
    assert (r.retired_on if r else None) == retired_on


@pytest.mark.parametrize("requirements,torch,pip", [
    ([], None, None),
    (["numpy", "torch==2.8.0"], "2.8.0", "torch==2.8.0"),
    (["torch<=1.12"], "1.12.0", "torch<=1.12,==1.12.*"),
    (["torch>=2.6,<2.10"], "2.9.0", "torch<2.10,>=2.6,==2.9.*"),
])
def test_the_torch_a_job_pins(requirements, torch, pip):
    from importlib.metadata import version

    got = job_torch(requirements)
    client = version("torch").split("+")[0]
    assert got == ((torch, pip) if torch else (client, f"torch=={client}"))


def spec(**fields):
    return parse_job(yaml.safe_dump({"name": "t", "job": "cnn", **fields}))


def test_plan_never_chooses_what_its_software_cannot_run_and_says_what_it_would_install():
    offers = [o for o in load_offers() if o.cloud == "gcp"]
    p = planner.plan(spec(resources={"clouds": ["gcp"]}), offers, profile=PROFILE)
    assert p.chosen is not None and p.chosen.offer.accelerator != "K80"
    k80 = [c for c in p.candidates if c.offer.accelerator == "K80"]
    assert k80 and all(not c.feasible and "GCP K80 retired on 2024-05-01" in c.reason for c in k80)
    gpu_feasible = [c for c in p.candidates if c.feasible and c.offer.accelerator]
    assert gpu_feasible  # the check below reads some GPU candidates
    for c in gpu_feasible:
        s = c.to_json()["software"]
        assert s["wheel_index"] in ("cu126", "cu130") and s["torch"] and s["driver_branch"] == 580
        assert s["image"].endswith("common-cu129-ubuntu-2204-nvidia-580")


def test_an_old_torch_pin_plans_the_old_wheels_and_rules_out_new_gpus():
    offers = [o for o in load_offers() if o.cloud == "gcp" and o.accelerator in ("T4", "H100")]
    p = planner.plan(spec(resources={"clouds": ["gcp"]}, requirements=["torch<=1.12"]), offers, profile=PROFILE)
    t4 = [c for c in p.candidates if c.offer.accelerator == "T4"]
    h100 = [c for c in p.candidates if c.offer.accelerator == "H100"]
    assert t4 and all(c.to_json()["software"]["wheel_index"] == "cu113" for c in t4)
    assert h100 and all(not c.eligible and "no torch 1.12 wheel supports it" in c.reason for c in h100)


def test_a_retired_gpu_wish_names_the_nearest_current_offer():
    p = planner.plan(spec(resources={"accelerators": "K80:1", "clouds": ["aws", "gcp"]}), load_offers(),
                     profile=PROFILE)
    assert p.chosen is None
    msg = p.nothing_fits_message()
    assert "K80 is retired: AWS p2 (K80) retired on 2025-04-30; GCP K80 retired on 2024-05-01" in msg
    current = [c for c in p.candidates if c.offer.accelerator and "retired" not in (c.reason or "")
               and "no torch" not in (c.reason or "") and "image" not in (c.reason or "") and c.estimate.fits]
    best = min(current, key=lambda c: (c.estimate.cost, c.estimate.hours, c.offer.key, c.spot))
    assert f"Nearest current offer: {best.offer.cloud} {best.offer.region} {best.offer.instance_type}" in msg
    assert f"${best.offer.hourly(best.spot):.2f}/h, est. {best.estimate.hours:.2f} h" in msg


def test_price_age_warning():
    p = planner.plan(spec(resources={"clouds": ["aws"]}), [o for o in load_offers() if o.cloud == "aws"],
                     profile=PROFILE)
    assert price_age_note(p.candidates, today=dt.date(2025, 8, 1)) is None  # 2025-07-01 prices: 31 days
    note = price_age_note(p.candidates, today=dt.date(2026, 11, 23))
    assert "2025-07-01 (510 days, more than 90)" in note and "dlrun catalog refresh" in note


def test_cli_k80_job_exits_3_saying_why_and_json_carries_software(tmp_path, dlrun_home, monkeypatch):
    from orchestrator.cli import plan as cli_plan
    from orchestrator.errors import DlrunError

    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    job = tmp_path / "k80.yaml"
    fields = {"name": "k80", "job": "cnn", "reference": {"accelerator": "T4", "hours": 0.5},
              "resources": {"accelerators": "K80:1", "clouds": ["aws", "gcp"]}}
    job.write_text(yaml.safe_dump(fields))
    r = CliRunner().invoke(cli_plan.plan_command, [str(job)])
    assert isinstance(r.exception, DlrunError) and r.exception.exit_code == 3
    assert re.search(r"K80 is retired: .* Nearest current offer: (aws|gcp) \S+ \S+ (T4|L4|A10G)( spot)? at "
                     r"\$\d+\.\d\d/h, est\. \d+\.\d\d h for \$\d+\.\d\d", str(r.exception))
    job.write_text(yaml.safe_dump({**fields, "resources": {"clouds": ["aws", "gcp"]}}))
    r = CliRunner().invoke(cli_plan.plan_command, [str(job), "--json", "--any-cloud"])  # no credentials here
    rows = json.loads(r.stdout)["candidates"]
    chosen = next(c for c in rows if c["chosen"])
    assert chosen["software"]["image"] and chosen["software"]["torch"]
    cloud_rows = [c for c in rows if c["cloud"] != "local"]
    assert cloud_rows and all(c["software"] for c in cloud_rows)


def test_this_machines_old_gpu_needs_a_torch_that_still_supports_it():
    from infra.catalog import Offer
    from orchestrator.planning.software import exclusion_reason

    def local(gpu):
        return Offer(cloud="local", region="local", instance_type=gpu, accelerator=gpu, accelerator_count=1,
                     gpu_memory_gb=12, vcpus=8, memory_gb=32, price_per_hour=0.0, spot_price_per_hour=None)

    assert exclusion_reason(spec(), local("K80")).startswith("K80 (sm_37): no torch 2.")
    assert exclusion_reason(spec(requirements=["torch==1.12.1"]), local("K80")) is None
    assert exclusion_reason(spec(), local("T4")) is None


# --- what a cloud node's boot gets: mirrors and the root volume ---------------------------------------

def _offer(cloud, instance_type, gpu=None):
    return next(o for o in load_offers() if o.cloud == cloud and o.instance_type == instance_type
                and o.accelerator == gpu)


def _spec(**extra):
    return parse_job(yaml.safe_dump({"name": "t", "job": "cnn", **extra}))


def test_mirrors_from_config_reach_the_boot(tmp_path, monkeypatch):
    from orchestrator.planning.software import boot_settings

    (tmp_path / "home").mkdir(exist_ok=True)
    monkeypatch.setenv("DLRUN_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "config.yaml").write_text(
        "mirrors:\n  pypi: http://10.0.0.9:8080/simple/\n  torch: http://10.0.0.9:8080/whl\n")
    got = boot_settings(_spec(), _offer("aws", "g4dn.xlarge", "T4"))
    assert got["pip_index_url"] == "http://10.0.0.9:8080/simple"
    assert got["torch_index_url"] == "http://10.0.0.9:8080/whl/cu130"  # download.pytorch.org/whl/cu130, mirrored
    assert "apt_mirror" not in got


@pytest.mark.parametrize("text,message", [
    ("mirrors:\n  conda: http://conda.example/\n", "mirrors: unknown key conda; known: pypi, torch, apt"),
    ("mirrors:\n  pypi: pypi.example/simple\n", "mirrors.pypi: expected a URL"),
    ("mirrors:\n  pypi: https://me:s3cret@pypi.example/simple\n", "mirrors.pypi: the URL carries credentials"),
])
def test_bad_mirror_settings_say_what_to_fix(tmp_path, monkeypatch, text, message):
    from orchestrator.config import load_settings
    from orchestrator.errors import UsageError

    (tmp_path / "home").mkdir(exist_ok=True)
    monkeypatch.setenv("DLRUN_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "config.yaml").write_text(text)
    with pytest.raises(UsageError, match=re.escape(message)):
        load_settings()


def test_the_root_volume_is_sized_from_the_plan(tmp_path):
    from orchestrator.planning import software as s

    cpu, gpu = _offer("aws", "c7i.large"), _offer("aws", "g4dn.xlarge", "T4")
    assert s.boot_settings(_spec(), cpu)["root_volume_gb"] == s.ROOT_FLOOR_GB  # 3 + 1 + 1 + 10 = 15 GB: the floor
    cuda = s.boot_settings(_spec(), gpu)["root_volume_gb"]
    assert cuda == 65 and cuda > 8  # 40 + 1 + 7 + 10 = 58 GB, a tenth free; Canonical's AMI default is 8 GiB
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "big.bin", "wb") as f:
        f.truncate(30 * 10**9)  # 30 GB, sparse: a local data input the node syncs onto its disk
    job = _spec(data=[str(data)])
    assert s.boot_settings(job, cpu)["root_volume_gb"] == 50  # (15 + 30) / 0.9
    assert s.boot_settings(job, gpu)["root_volume_gb"] == 98  # (58 + 30) / 0.9, rounded up
