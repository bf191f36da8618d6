"""The job's software on each offer: which torch it needs, whether an offer's GPU can run it, and the
notes a plan carries about retired GPUs and old prices. The tables live in infra/software.py."""
from __future__ import annotations

import datetime as dt
from functools import lru_cache

from infra import capabilities
from infra import software as sw
from infra.catalog import Offer

PRICE_MAX_AGE_DAYS = 90
# what the built-in jobs run with when the job pins no torch: the client's own release
FALLBACK_TORCH = "2.13.0"


@lru_cache(maxsize=1)
def client_torch() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch").split("+")[0]
    except PackageNotFoundError:
        return FALLBACK_TORCH


def job_torch(requirements: list[str]) -> tuple[str, str]:
    """(torch version planned, pip requirement) from the job's `requirements`, or the client's torch."""
    from packaging.requirements import InvalidRequirement, Requirement

    for line in requirements:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.name.lower() != "torch" or not str(req.specifier):
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if exact:
            return exact[0], f"torch{req.specifier}"
        chosen = [m for m in sw.torch_minors() if req.specifier.contains(f"{m}.0", prereleases=False)]
        if chosen:  # newest minor the range allows; pip takes its newest patch within the range
            minor = chosen[-1]
            return f"{minor}.0", f"torch{req.specifier},=={minor}.*"
        return str(req.specifier), f"torch{req.specifier}"
    v = client_torch()
    return v, f"torch=={v}"


def _boots_nothing(offer: Offer) -> bool:
    """This machine, or a team's cluster: it runs the torch it has (dlrun boots nothing there)."""
    return not capabilities(offer.cloud).provisioned


def software_for(spec, offer: Offer) -> sw.SoftwarePlan:
    """Raises sw.Unsupported when the offer cannot run the job's torch."""
    version, requirement = job_torch(list(spec.requirements))
    plan = sw.software_plan(offer.cloud, offer.accelerator, version, requirement)
    image = spec.resources.image
    if image:  # the user's image overrides the table's; the wheels still follow the GPU
        from dataclasses import replace

        plan = replace(plan, image=image, image_resolver="job file resources.image")
    return plan


def exclusion_reason(spec, offer: Offer) -> str | None:
    """Why the job's software rules an offer out (retired family, no torch wheel for its GPU), or None."""
    # this machine's driver is what it is: only ask whether any build of the torch has its arch
    if _boots_nothing(offer):
        if not offer.accelerator or sw.generation(offer.accelerator) is None:
            return None
        try:
            sw.choose_wheels(offer.accelerator, job_torch(list(spec.requirements))[0])
        except sw.Unsupported as e:
            return str(e)
        return None
    retired = sw.retirement(offer.cloud, offer.instance_type, offer.accelerator)
    if retired:
        return f"{retired.short()}; never launched"
    try:
        software_for(spec, offer)
    except sw.Unsupported as e:
        return str(e)
    return None


def container_settings(spec, mirrors: dict) -> dict:
    """BootstrapConfig fields for a job's `image:` on a cloud node (none without one)."""
    if not spec.image:
        return {}
    from infra.images.reference import parse_reference
    from infra.images.registry import plain_http_allowed

    ref = parse_reference(spec.image)
    return {"container_image": ref.full, "container_pull": spec.image_pull or "if-missing",
            "container_insecure": plain_http_allowed(ref), "apt_mirror": mirrors.get("apt", "")}


def boot_settings(spec, offer: Offer) -> dict:
    """BootstrapConfig fields for a cloud node: the planned torch and its index, the GPUs to check, the job's
    image."""
    if _boots_nothing(offer):
        return {}
    from orchestrator.config import load_settings

    mirrors = load_settings().mirrors
    fields = {"gpu_count": offer.accelerator_count if offer.accelerator else 0, "gpu_memory_gb": offer.gpu_memory_gb,
              "pip_index_url": mirrors.get("pypi", ""), **container_settings(spec, mirrors)}
    try:
        plan = software_for(spec, offer)
    except sw.Unsupported:  # the planner excluded it; a forced launch still checks the GPU
        return {**fields, "root_volume_gb": root_volume_gb(spec, offer, None)}
    return {**fields, "torch_requirement": plan.torch_requirement,
            "torch_index_url": mirrored_wheel_index(plan.index_url, mirrors.get("torch", "")),
            "root_volume_gb": root_volume_gb(spec, offer, plan)}


# --- the root volume -------------------------------------------------------------------------------
# What a node's root disk holds, in GB. Image: Canonical's Ubuntu 22.04 AMI / GCE image use about 2-3 GB of
# their 8 GiB / 10 GB default disk [unverified: measure with df on a fresh VM]; a deep-learning image carries
# several CUDA toolkits (the AWS base OSS driver AMI lists four CUDA stacks) [unverified; the providers take
# the larger of this size and the image's own disk size]. The venv, measured or summed from PyPI:
# Ray[default,train] 2.60 + torch 2.13 CPU + scikit-learn + numpy installed by the boot script into a stock
# Debian 12 root is 1.5 GB (2026-11-26; torch alone 754 MB); a CUDA torch downloads ~2.5 GB (PyPI, 2026-11-26:
# torch 2.15.0 manylinux x86_64 539 MB, triton 286 MB, nvidia-cudnn-cu13 517 MB, -nccl 305 MB, -nvshmem 182
# MB, -cusparselt 170 MB, plus cuBLAS) and about twice that installed. SCRATCH: checkpoints written on the
# node before they are uploaded, Ray's session logs and object spilling under /tmp/ray; the job's other
# packages. Ray refuses new objects on a disk more than 95% full (local_fs_capacity_threshold), so a tenth
# stays free. Bucket data inputs cannot be sized at plan time (that needs the cloud's API) and are left to
# SCRATCH; local directories are counted (a node syncs them onto its disk).
IMAGE_USED_GB = {"cpu": 3.0, "gpu": 40.0}
VENV_GB = {"ray": 1.0, "cpu torch": 1.0, "cuda torch": 7.0}
SCRATCH_GB = 10.0
FREE_SHARE = 0.10
# the floor: a CPU job with nothing else needs ~17 GB by the sums above; gp3 / pd-balanced cost about
# $0.08-0.10 per GB-month, so 20 GB is $0.002-0.003 an hour, little next to the cheapest node
ROOT_FLOOR_GB = 20


def root_volume_gb(spec, offer: Offer, plan: "sw.SoftwarePlan | None") -> int:
    """The root disk a cloud node of `offer` needs for this job: image + venv + local data + scratch, a
    tenth free, at least ROOT_FLOOR_GB (whole GB). The providers use it where it is more than the image's
    own disk size."""
    import math

    from orchestrator.planning.data_inputs import local_bytes

    gpu = bool(offer.accelerator) or bool(plan and plan.cuda)
    torch = "cuda torch" if (plan.cuda if plan else gpu) else "cpu torch"
    try:
        data_gb = local_bytes(list(spec.data)) / 1e9
    except OSError:  # a directory that went away: the upload will say so
        data_gb = 0.0
    need = IMAGE_USED_GB["gpu" if gpu else "cpu"] + VENV_GB["ray"] + VENV_GB[torch] + data_gb + SCRATCH_GB
    return max(ROOT_FLOOR_GB, math.ceil(need / (1 - FREE_SHARE)))


def mirrored_wheel_index(index_url: str | None, mirror: str) -> str | None:
    """torch's wheel index as the user's mirror serves it (config.yaml mirrors.torch stands for
    https://download.pytorch.org/whl)."""
    base = sw.WHEEL_URL.split("{", 1)[0].rstrip("/")
    if not index_url or not mirror or not index_url.startswith(base):
        return index_url
    return mirror.rstrip("/") + index_url[len(base):]


EXPECT_GPU_ENV = "DLRUN_EXPECT_GPU"  # read by jobs/train.py: never fall back to CPU on a GPU offer


def job_env(offer: Offer) -> dict[str, str]:
    return {EXPECT_GPU_ENV: "1"} if offer.accelerator else {}


def software_json(spec, offer: Offer) -> dict | None:
    """The candidate's software plan for `dlrun plan --json` (None for this machine)."""
    if _boots_nothing(offer):
        return None
    try:
        return software_for(spec, offer).to_json()
    except sw.Unsupported as e:
        return {"unsupported": str(e)}


# --- notes ----------------------------------------------------------------------------------------

def retired_wish_notes(spec, candidates) -> list[str]:
    """For a wish of a retired GPU: say so, and name the nearest current offer (price and time)."""
    notes = []
    for wish in spec.resources.accelerator_wishes or []:
        gone = sw.retirements_of(wish.name)
        if not gone:
            continue
        current = [c for c in candidates if c.offer.accelerator and c.offer.cloud in spec.resources.clouds
                   and exclusion_reason(spec, c.offer) is None and c.estimate.fits
                   and c.offer.accelerator_count >= wish.count and not (c.reason or "").startswith("blocked")]
        say = (f"{wish.name} is retired: " + "; ".join(r.short() for r in gone)
               + " (sources: configs/catalog/retired.csv)")
        if current:
            best = min(current, key=lambda c: (c.estimate.cost, c.estimate.hours, c.offer.key, c.spot))
            o = best.offer
            gpu = f"{o.accelerator_count}×{o.accelerator}" if o.accelerator_count > 1 else o.accelerator
            say += (f". Nearest current offer: {o.cloud} {o.region} {o.instance_type} {gpu}"
                    f"{' spot' if best.spot else ''} at ${o.hourly(best.spot):.2f}/h, est. {best.estimate.hours:.2f} h "
                    f"for ${best.estimate.cost:.2f}; ask for `accelerators: {o.accelerator}:{wish.count}`")
        notes.append(say)
    return notes


def chosen_note(chosen) -> str | None:
    """One line saying what the chosen cloud node will boot and install (so anyone can check it)."""
    s = chosen.software if chosen is not None else None
    if not s or "unsupported" in s:
        return None
    gpu = f"driver R{s['driver_branch']}+, CUDA {s['cuda']}, " if s.get("cuda") else ""
    return (f"software: {s['image']} ({s['image_resolver']}), {gpu}{s['torch_requirement']} from "
            f"{s['index_url']}")


def price_age_note(candidates, today: dt.date | None = None) -> str | None:
    """A warning when the prices the plan used are older than PRICE_MAX_AGE_DAYS."""
    today = today or dt.date.today()
    dates = set()
    for c in candidates:
        if not capabilities(c.offer.cloud).billed or not c.eligible:  # an unbilled offer used no price
            continue
        d = c.offer.spot_price_date if c.spot else c.offer.price_date
        try:
            dates.add(dt.date.fromisoformat(d))
        except (TypeError, ValueError):
            continue
    if not dates:
        return None
    oldest = min(dates)
    age = (today - oldest).days
    if age <= PRICE_MAX_AGE_DAYS:
        return None
    return (f"prices are old: the oldest used is dated {oldest.isoformat()} ({age} days, more than "
            f"{PRICE_MAX_AGE_DAYS}); run `dlrun catalog refresh` (reads both clouds' prices and offers)")


