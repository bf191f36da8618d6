"""This machine's GPU as a planner offer: nvidia-smi's product name resolved to the GPU table's row (whole
names such as 'NVIDIA GeForce RTX 4090' and 'NVIDIA H100 PCIe' first, then word by word), and a GPU the
table does not have kept under its own name rather than taken for a GPU that shares a word with it."""
from __future__ import annotations

import subprocess

import pytest

from infra.local import gpus as local_gpus


class FakeNvidiaSmi:
    """`nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` on a machine with these GPUs.

    Reproduces: one line per GPU, `<product name>, <MiB>` (NVIDIA's nvidia-smi documentation, --query-gpu),
    product names as real drivers print them (e.g. 'Tesla T4', 'NVIDIA A100-SXM4-80GB', 'NVIDIA GeForce RTX
    4090', 'NVIDIA RTX A6000'; names as recorded in sitar-lab/NeuSight's device files and
    zzc0721/torch-performance-test-data's result table). Does not reproduce: other query fields, driver
    errors (nvidia-smi's failure paths are tested in tests/integration/test_boot_gpu.py), MIG devices."""

    def __init__(self, *gpus: tuple[str, int]):
        self.stdout = "".join(f"{name}, {mib}\n" for name, mib in gpus)

    def __call__(self, argv, **_kw):
        assert argv[:2] == ["nvidia-smi", "--query-gpu=name,memory.total"]
        return subprocess.CompletedProcess(argv, 0, stdout=self.stdout, stderr="")


@pytest.fixture
def smi(monkeypatch):
    def install(*gpus: tuple[str, int]):
        monkeypatch.delenv("DLRUN_LOCAL_GPUS", raising=False)
        monkeypatch.setattr(local_gpus.shutil, "which", lambda cmd: f"/usr/bin/{cmd}" if cmd == "nvidia-smi" else None)
        monkeypatch.setattr(local_gpus.subprocess, "run", FakeNvidiaSmi(*gpus))
        local_gpus.detect_gpus.cache_clear()
        offer = local_gpus.local_offers()[0]
        local_gpus.detect_gpus.cache_clear()
        return offer
    return install


@pytest.mark.parametrize("product,mib,gpu", [
    ("NVIDIA GeForce RTX 4090", 24564, "RTX4090"),
    ("NVIDIA GeForce RTX 3090", 24576, "RTX3090"),
    ("NVIDIA GeForce RTX 4060 Ti", 16380, "RTX4060Ti"),
    ("NVIDIA GeForce RTX 5090", 32607, "RTX5090"),
    ("NVIDIA RTX A6000", 49140, "A6000"),
    ("NVIDIA RTX 6000 Ada Generation", 49140, "RTX6000Ada"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "RTXPRO6000"),
    ("NVIDIA H100 PCIe", 81559, "H100-PCIE"),
    ("NVIDIA H100 80GB HBM3", 81559, "H100"),
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
    ("NVIDIA A100-PCIE-40GB", 40960, "A100"),
    ("Tesla V100-SXM2-32GB", 32768, "V100-32GB"),
    ("Tesla T4", 15360, "T4"),
    ("NVIDIA A10G", 23028, "A10G"),
    ("NVIDIA L40S", 46068, "L40S"),
    ("NVIDIA B200", 183359, "B200"),
])
def test_nvidia_smi_product_names_resolve_to_the_gpu_table(smi, product, mib, gpu):
    offer = smi((product, mib), (product, mib))
    assert (offer.cloud, offer.accelerator, offer.accelerator_count) == ("local", gpu, 2)


@pytest.mark.parametrize("product", [
    "NVIDIA GeForce RTX 4090 Laptop GPU",  # AD103 with 76 SMs, not the desktop card's 128
    "NVIDIA GeForce RTX 3080 Ti",          # 80 SMs and 12 GB, not the RTX 3080
    "NVIDIA GeForce RTX 4060",             # AD107, not the 4060 Ti
    "NVIDIA A10",                          # NVIDIA's A10, not AWS's A10G
])
def test_a_gpu_the_table_lacks_keeps_its_own_name(smi, product):
    offer = smi((product, 16384))
    assert offer.accelerator == product and offer.source == f"this machine ({product})"
