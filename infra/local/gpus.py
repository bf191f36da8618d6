"""This machine's GPUs (from nvidia-smi, no torch import) and CPU, as $0/h planner offers."""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from infra.catalog import Offer, canonical_gpu, gpus


@dataclass(frozen=True)
class LocalGpu:
    name: str
    memory_gb: float


def _compact(name: str) -> str:
    """A product name without vendor words, case, spaces or punctuation: 'NVIDIA GeForce RTX 4090' -> RTX4090."""
    upper = name.upper()
    for vendor in ("NVIDIA", "GEFORCE", "TESLA"):
        upper = upper.replace(vendor, "")
    return "".join(ch for ch in upper if ch.isalnum())


def _canonical(raw: str, memory_gb: float) -> str | None:
    """nvidia-smi's product name as a catalog GPU: the whole name first ('NVIDIA GeForce RTX 4090' -> RTX4090,
    'NVIDIA H100 PCIe' -> H100-PCIE), then word by word ('Tesla T4' -> T4, 'NVIDIA A100-SXM4-80GB' -> A100-80GB,
    'NVIDIA H100 80GB HBM3' -> H100). A name that only shares a word with a catalog GPU ('NVIDIA GeForce RTX
    4090 Laptop GPU', 'RTX 3080 Ti') stays unknown: a different GPU is measured, never assumed."""
    whole = {_compact(n): spec.name for spec in gpus().values() for n in (spec.name, *spec.aliases)}
    if name := whole.get(_compact(raw)):
        return name
    words = raw.replace("NVIDIA", "").replace("Tesla", "").replace("-", " ").split()
    for w in words:
        name = canonical_gpu(w)
        if name == "A100" and memory_gb > 45:
            return "A100-80GB"
        if name == "V100" and memory_gb > 20:
            return "V100-32GB"
        if name:
            return name
    return None


@lru_cache(maxsize=1)
def detect_gpus() -> tuple[LocalGpu, ...]:
    """GPUs of this machine from nvidia-smi (no torch import); empty on a CPU-only machine."""
    if os.environ.get("DLRUN_LOCAL_GPUS") == "none" or not shutil.which("nvidia-smi"):
        return ()
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    gpus = []
    for line in out.strip().splitlines():
        name, _, mem = line.rpartition(",")
        try:
            gpus.append(LocalGpu(name=name.strip(), memory_gb=round(float(mem) / 1024, 1)))
        except ValueError:
            continue
    return tuple(gpus)


def local_gpu_name() -> str | None:
    """This machine's first GPU as its local offer names it: the catalog's name, else nvidia-smi's."""
    gpus = detect_gpus()
    return (_canonical(gpus[0].name, gpus[0].memory_gb) or gpus[0].name) if gpus else None


def local_offers() -> list[Offer]:
    """The local machine as planner candidates: its GPUs when it has them, and its CPU, at $0/h."""
    cpus = os.cpu_count() or 1
    mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    offers = [Offer(cloud="local", region="local", instance_type="cpu", accelerator=None, accelerator_count=0,
                    gpu_memory_gb=0.0, vcpus=cpus, memory_gb=mem_gb, price_per_hour=0.0,
                    spot_price_per_hour=None, source="this machine")]
    gpus = detect_gpus()
    if gpus:
        g = gpus[0]
        name = local_gpu_name() or g.name
        offers.insert(0, Offer(cloud="local", region="local", instance_type="gpu", accelerator=name,
                               accelerator_count=len(gpus), gpu_memory_gb=g.memory_gb, vcpus=cpus,
                               memory_gb=mem_gb, price_per_hour=0.0, spot_price_per_hour=None,
                               source=f"this machine ({g.name})"))
    return offers
