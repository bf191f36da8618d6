"""The boot script's torch install and GPU check, per GPU generation, run for real by bash (the harness
of test_bootstrap.py) with a fake `nvidia-smi` in the image: the exact pip command from the planned wheel
index, and a boot that fails with the reason when the GPU is missing, short or unusable by torch."""
from __future__ import annotations

from importlib.metadata import version

import pytest
import yaml

from infra.base import BootstrapConfig
from infra.catalog import load_offers
from infra.vm.bootstrap import startup_script
from orchestrator.planning.software import boot_settings
from orchestrator.planning.spec import parse_job
from tests.support.boot_stubs import STUB, node, stub, uv_calls  # noqa: F401 (fixture)

TORCH = version("torch").split("+")[0]
NO_CUDA = '\nif [ "$1" = "-c" ] && [[ "$2" == *torch* ]] && [ -e "$STUB_DIR/no_cuda" ]; then echo "torch CUDA None GPUs 0"; exit 1; fi\n'


def offer(cloud, instance_type, gpu):
    return next(o for o in load_offers() if o.cloud == cloud and o.instance_type == instance_type
                and o.accelerator == gpu)


def spec(requirements=()):
    return parse_job(yaml.safe_dump({"name": "t", "job": "cnn", "requirements": list(requirements)}))


def cfg_for(o, requirements=()):
    return BootstrapConfig(ray_version="2.60.0", python_packages=list(requirements),
                           **boot_settings(spec(requirements), o))


def image(tmp_path, smi: str | None, no_cuda=False):
    """The image's `nvidia-smi` (None: the image has none) and whether its torch sees CUDA."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if smi is not None:
        (bin_dir / "nvidia-smi").write_text("#!/bin/bash\n" + smi)
        (bin_dir / "nvidia-smi").chmod(0o755)
    if no_cuda:
        (tmp_path / "no_cuda").touch()


def python_with_cuda_probe(tmp_path):
    # the node fixture has written bin/python3: the same stub, whose `python -c` fails on request
    (tmp_path / "bin" / "python3").write_text(stub(STUB, tmp_path) + stub(NO_CUDA, tmp_path))


GENERATIONS = [
    ("aws", "g4dn.xlarge", "T4", 1, 16, "cu130", "echo 'Tesla T4, 15360'"),
    ("aws", "g5.xlarge", "A10G", 1, 24, "cu130", "echo 'NVIDIA A10G, 23028'"),
    ("aws", "g6.xlarge", "L4", 1, 24, "cu130", "echo 'NVIDIA L4, 23034'"),
    ("aws", "p4d.24xlarge", "A100", 8, 40, "cu130", "for i in 1 2 3 4 5 6 7 8; do echo 'NVIDIA A100-SXM4-40GB, 40960'; done"),
    ("aws", "p5.4xlarge", "H100", 1, 80, "cu130", "echo 'NVIDIA H100 80GB HBM3, 81559'"),
    ("gcp", "n1-standard-8", "V100", 1, 16, "cu126", "echo 'Tesla V100-SXM2-16GB, 16384'"),
    ("gcp", "n1-standard-8", "P100", 1, 16, "cu126", "echo 'Tesla P100-PCIE-16GB, 16384'"),
    ("gcp", "n1-standard-8", "T4", 1, 16, "cu130", "echo 'Tesla T4, 15360'"),
]


@pytest.mark.parametrize("cloud,instance_type,gpu,count,mem,index,smi", GENERATIONS)
def test_each_generation_installs_its_wheels_and_passes_the_check(node, tmp_path, cloud, instance_type, gpu,
                                                                   count, mem, index, smi):
    o = offer(cloud, instance_type, gpu)
    cfg = cfg_for(o)
    assert (cfg.gpu_count, cfg.gpu_memory_gb) == (count, mem)
    image(tmp_path, smi)
    rc, calls, node_dir, out = node(startup_script(cfg, is_head=True))
    assert rc == 0, out
    torch, rest = uv_calls(calls)
    assert torch[5:] == ["--index-url", "https://pypi.org/simple",  # searched second: what torch's index lacks
                         "--extra-index-url", f"https://download.pytorch.org/whl/{index}", f"torch=={TORCH}"]
    assert "torch" not in rest and rest[5:9] == ["--index-url", "https://pypi.org/simple",  # the rest from PyPI,
                                                 "--constraint", f"{node_dir}/constraints.txt"]  # torch held
    assert (node_dir / "constraints.txt").read_text() == f"torch=={TORCH}\n"
    probe = next(i for i, c in enumerate(calls) if c.startswith("python -c import sys, torch"))
    assert probe > max(i for i, c in enumerate(calls) if c.startswith("uv pip install"))
    assert f"sys.exit(0 if n >= {count} else 1)" in calls[probe]
    assert (node_dir / "ready").exists() and "nvidia-smi: " in (node_dir / "boot.log").read_text()


def test_a_pinned_old_torch_comes_from_its_index_and_is_not_reinstalled(node, tmp_path):
    image(tmp_path, "echo 'Tesla T4, 15360'")
    cfg = cfg_for(offer("gcp", "n1-standard-8", "T4"), requirements=["torch<=1.12", "einops==0.8.0"])
    rc, calls, _, out = node(startup_script(cfg, is_head=True))
    assert rc == 0, out
    torch, rest = uv_calls(calls)
    assert torch[7:] == ["--extra-index-url", "https://download.pytorch.org/whl/cu113", "torch<=1.12,==1.12.*"]
    assert rest[9:] == ["ray[default,train]==2.60.0", "scikit-learn", "numpy", "pip", "einops==0.8.0"]


def test_a_cpu_offer_gets_cpu_wheels_and_no_gpu_check(node, tmp_path):
    cfg = cfg_for(offer("aws", "c7i.large", None))
    assert cfg.gpu_count == 0
    script = startup_script(cfg, is_head=True)
    assert "nvidia-smi" not in script and "torch.cuda" not in script
    rc, calls, node_dir, out = node(script)
    assert rc == 0, out
    torch = uv_calls(calls)[0]
    assert torch[7:] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu", f"torch=={TORCH}"]


T4 = ("aws", "g4dn.xlarge", "T4")


@pytest.mark.parametrize("smi,reason", [
    (None, "GPU check: no nvidia-smi on this image (no NVIDIA driver); the offer has 1 GPU(s) of 16 GB"),
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
     "GPU check: nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
    ("exit 0", "GPU check: nvidia-smi shows 0 GPU(s), the offer has 1"),
    ("echo 'Tesla T4, 7680'", "GPU check: a GPU has less than 14745 MiB (the offer's 16 GB): Tesla T4, 7680"),
])
def test_no_usable_gpu_fails_the_boot_before_ray_with_the_reason(node, tmp_path, smi, reason):
    image(tmp_path, smi)
    rc, calls, node_dir, out = node(startup_script(cfg_for(offer(*T4)), is_head=True))
    assert rc != 0
    assert (node_dir / "failed").read_text().startswith(reason), (node_dir / "failed").read_text()
    assert not [c for c in calls if c.startswith(("python - ", "uv ")) or "ray.scripts.scripts" in c]  # before all
    assert not (node_dir / "ready").exists()


def test_too_few_gpus_fail_the_boot(node, tmp_path):
    image(tmp_path, "for i in 1 2 3 4; do echo 'NVIDIA A100-SXM4-40GB, 40960'; done")
    rc, _, node_dir, _ = node(startup_script(cfg_for(offer("aws", "p4d.24xlarge", "A100")), is_head=True))
    assert rc != 0 and (node_dir / "failed").read_text().startswith("GPU check: nvidia-smi shows 4 GPU(s), the offer has 8")


def test_torch_that_cannot_use_the_driver_fails_the_boot(node, tmp_path):
    image(tmp_path, "echo 'Tesla T4, 15360'", no_cuda=True)
    python_with_cuda_probe(tmp_path)
    rc, calls, node_dir, _ = node(startup_script(cfg_for(offer(*T4)), is_head=True))
    assert rc != 0
    assert (node_dir / "failed").read_text().startswith(
        f"GPU check: torch.cuda.is_available() is false in the venv (torch=={TORCH} from "
        "https://download.pytorch.org/whl/cu130)")
