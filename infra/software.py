"""The GPU software compatibility table: which driver, CUDA, torch wheel and image each GPU generation runs.

Loaded from configs/catalog/ (stdlib only: fast to import); every row carries its source and the date
it was checked:
- gpu_generations.csv  compute capability, the last driver branch and CUDA that support a generation
- torch_wheels.csv     per torch release range and wheel index (cu118 ...): CUDA, driver floor, GPU archs
- images.csv           per cloud the image a GPU / CPU node boots, how it is resolved, its driver branch
- retired.csv          instance families / GPUs a cloud has retired (never launched)
"""
from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from infra.catalog import _dir, canonical_gpu

WHEEL_URL = "https://download.pytorch.org/whl/{index}"
CPU_INDEX = "cpu"  # torch's CPU-only wheels: a CPU node does not download GBs of CUDA libraries


@dataclass(frozen=True)
class Generation:
    accelerator: str
    compute_capability: str
    last_driver_branch: int | None  # None: supported by current drivers
    max_cuda: str
    source: str


@dataclass(frozen=True)
class Wheels:
    torch_min: str
    torch_max: str
    index: str
    cuda: str
    min_driver_branch: int
    archs: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Image:
    cloud: str
    kind: str       # gpu | cpu
    resolver: str   # ssm (AWS public parameter) | family (GCE image family)
    name: str
    driver_branch: int | None
    min_compute_capability: str
    login_user: str
    owner: str      # the only account an AWS image may come from ('amazon' or an account id)
    source: str


@dataclass(frozen=True)
class Retirement:
    cloud: str
    instance_family: str
    accelerator: str
    retired_on: str
    source: str

    def short(self) -> str:
        what = f"{self.cloud.upper()} {self.instance_family} ({self.accelerator})" if self.instance_family \
            else f"{self.cloud.upper()} {self.accelerator}"
        return f"{what} retired on {self.retired_on}"

    def describe(self) -> str:
        return f"{self.short()} (source: {self.source})"


@dataclass(frozen=True)
class SoftwarePlan:
    """What a node of an offer boots and installs: image, driver, CUDA, and torch from `wheel_index`."""

    image: str
    image_resolver: str
    driver_branch: int | None
    cuda: str | None
    torch: str
    torch_requirement: str
    wheel_index: str | None
    compute_capability: str | None = None

    @property
    def index_url(self) -> str | None:
        return WHEEL_URL.format(index=self.wheel_index) if self.wheel_index else None

    def to_json(self) -> dict:
        return {**asdict(self), "index_url": self.index_url}


class Unsupported(ValueError):
    """The offer cannot run this torch: the message says why and what to pin instead."""


def _ver(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def _major_minor(v: str) -> str:
    return ".".join(str(x) for x in _ver(v)[:2])


def _cc_ok(binary: str, device: str) -> bool:
    """An sm_XY cubin runs on a GPU of the same major and a minor >= Y (CUDA binary compatibility)."""
    b, d = _ver(binary), _ver(device)
    return b[0] == d[0] and b[1] <= d[1]


def _read(catalog_dir: Path, name: str) -> list[dict]:
    with open(catalog_dir / name, newline="") as f:
        return list(csv.DictReader(f))


@lru_cache(maxsize=4)
def _tables(catalog_dir: Path):
    gens = {r["accelerator"].upper(): Generation(
        r["accelerator"], r["compute_capability"],
        int(r["last_driver_branch"]) if r["last_driver_branch"] else None, r["max_cuda"], r["source"])
        for r in _read(catalog_dir, "gpu_generations.csv")}
    wheels = [Wheels(r["torch_min"], r["torch_max"], r["index"], r["cuda"], int(r["min_driver_branch"]),
                     tuple(a for a in r["archs"].split(";") if a), r["source"])
              for r in _read(catalog_dir, "torch_wheels.csv")]
    images = [Image(r["cloud"], r["kind"], r["resolver"], r["name"],
                    int(r["driver_branch"]) if r["driver_branch"] else None, r["min_compute_capability"],
                    r["login_user"], r["owner"], r["source"]) for r in _read(catalog_dir, "images.csv")]
    retired = [Retirement(r["cloud"], r["instance_family"], r["accelerator"], r["retired_on"], r["source"])
               for r in _read(catalog_dir, "retired.csv")]
    return gens, wheels, images, retired


def tables(catalog_dir: Path | None = None):
    return _tables(_dir(catalog_dir))


def generation(accelerator: str, catalog_dir: Path | None = None) -> Generation | None:
    name = canonical_gpu(accelerator, catalog_dir) or accelerator
    return tables(catalog_dir)[0].get(name.upper())


def torch_minors(catalog_dir: Path | None = None) -> list[str]:
    """Every torch minor release the wheel table covers, oldest first ('1.12', '2.0', ... '2.14')."""
    out: set[tuple[int, int]] = set()
    for w in tables(catalog_dir)[1]:  # a row spans minors of one major release
        lo, hi = _ver(w.torch_min), _ver(w.torch_max)
        out.update((lo[0], m) for m in range(lo[1], hi[1] + 1))
    return [f"{a}.{b}" for a, b in sorted(out)]


def retirement(cloud: str, instance_type: str, accelerator: str | None,
               catalog_dir: Path | None = None) -> Retirement | None:
    """The retirement that rules an offer out, if any (by instance family, or by GPU on that cloud)."""
    family = instance_type.split(".")[0] if cloud == "aws" else ""
    gpu = ((canonical_gpu(accelerator, catalog_dir) or accelerator) if accelerator else "").upper()
    for r in tables(catalog_dir)[3]:
        if r.cloud != cloud:
            continue
        if r.instance_family and family.startswith(r.instance_family) \
                and family[len(r.instance_family):].isalpha() | (family == r.instance_family):  # p3, p3dn
            return r
        if not r.instance_family and gpu and r.accelerator.upper() == gpu:
            return r
    return None


def retirements_of(accelerator: str, catalog_dir: Path | None = None) -> list[Retirement]:
    gpu = (canonical_gpu(accelerator, catalog_dir) or accelerator).upper()
    return [r for r in tables(catalog_dir)[3] if r.accelerator.upper() == gpu]


def image_for(cloud: str, gpu: bool, catalog_dir: Path | None = None) -> Image | None:
    kind = "gpu" if gpu else "cpu"
    return next((i for i in tables(catalog_dir)[2] if i.cloud == cloud and i.kind == kind), None)


def _wheels_for(torch: str, catalog_dir: Path | None) -> list[Wheels]:
    v = _ver(torch)[:2]
    return [w for w in tables(catalog_dir)[1] if _ver(w.torch_min)[:2] <= v <= _ver(w.torch_max)[:2]]


def choose_wheels(accelerator: str, torch: str, driver_branch: int | None = None,
                  catalog_dir: Path | None = None) -> Wheels:
    """The newest-CUDA wheel index of `torch` whose binaries include the GPU's arch and whose driver
    floor the GPU (and the image's driver, when given) meets; Unsupported says why there is none."""
    gen = generation(accelerator, catalog_dir)
    if gen is None:
        raise Unsupported(f"{accelerator}: not in the GPU compatibility table (configs/catalog/gpu_generations.csv)")
    cc = gen.compute_capability
    label = f"{gen.accelerator} (sm_{cc.replace('.', '')})"
    releases = _wheels_for(torch, catalog_dir)
    if not releases:
        raise Unsupported(f"{label}: torch {torch} is not in the wheel table (configs/catalog/torch_wheels.csv)")
    fits = [w for w in releases if any(_cc_ok(a, cc) for a in w.archs)]
    if gen.last_driver_branch is not None:
        fits = [w for w in fits if w.min_driver_branch <= gen.last_driver_branch]
    if driver_branch is not None:
        fits = [w for w in fits if w.min_driver_branch <= driver_branch]
    if fits:
        return max(fits, key=lambda w: _ver(w.cuda))
    raise Unsupported(f"{label}: no torch {_major_minor(torch)} wheel supports it; {_hint(gen, torch, catalog_dir)}")


def _hint(gen: Generation, torch: str, catalog_dir: Path | None) -> str:
    """'pin torch<=1.12 with CUDA 11 to plan it': the torch range whose wheels still carry this arch."""
    ok = [w for w in tables(catalog_dir)[1] if any(_cc_ok(a, gen.compute_capability) for a in w.archs) and (
        gen.last_driver_branch is None or w.min_driver_branch <= gen.last_driver_branch)]
    if not ok:
        return "no torch wheel in the table supports it"
    oldest = min(ok, key=lambda w: _ver(w.torch_min))
    if _ver(torch)[:2] < _ver(oldest.torch_min)[:2]:
        return f"pin torch>={oldest.torch_min} to plan it"
    newest = max(ok, key=lambda w: _ver(w.torch_max))
    return f"pin torch<={newest.torch_max} with CUDA {newest.cuda.split('.')[0]} to plan it"


def software_plan(cloud: str, accelerator: str | None, torch: str, torch_requirement: str,
                  catalog_dir: Path | None = None) -> SoftwarePlan:
    """Image, driver, CUDA and torch wheel index for one offer; raises Unsupported."""
    if not accelerator:
        image = image_for(cloud, False, catalog_dir)
        return SoftwarePlan(image=image.name if image else "", image_resolver=image.resolver if image else "",
                            driver_branch=None, cuda=None, torch=torch, torch_requirement=torch_requirement,
                            wheel_index=CPU_INDEX)
    gen = generation(accelerator, catalog_dir)
    wheels = choose_wheels(accelerator, torch, None, catalog_dir)  # first: the torch reason is the useful one
    image = image_for(cloud, True, catalog_dir)
    driver = None
    if image is not None:
        if gen is not None and _ver(gen.compute_capability) < _ver(image.min_compute_capability or "0"):
            raise Unsupported(f"{gen.accelerator} (sm_{gen.compute_capability.replace('.', '')}): the {cloud} GPU "
                              f"image (driver R{image.driver_branch}+) supports sm_"
                              f"{image.min_compute_capability.replace('.', '')} and newer only")
        driver = image.driver_branch
        if gen is not None and gen.last_driver_branch is not None and driver is not None:
            driver = min(driver, gen.last_driver_branch)
        wheels = choose_wheels(accelerator, torch, driver, catalog_dir)
    return SoftwarePlan(image=image.name if image else "", image_resolver=image.resolver if image else "",
                        driver_branch=driver, cuda=wheels.cuda, torch=torch, torch_requirement=torch_requirement,
                        wheel_index=wheels.index, compute_capability=gen.compute_capability if gen else None)
