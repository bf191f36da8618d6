"""A job's `image:` before anything is provisioned: the registry's manifest for each node's architecture (one
line and exit 2 for a missing image, a missing architecture or refused credentials; exit 5 when the registry
cannot be reached), which backends can run it, and the pull's share of each candidate's start-up.

What cannot be known before the pull: whether the image has python3 (the local job checks it right after
pulling, infra/images/run_job.py) and its Ray (a team cluster's Ray checks that itself).

The pull is the manifest's compressed layer bytes at a download rate: on this machine DLRUN_LOCAL_PULL_MB_S,
nothing when the runtime already holds the image and image_pull is if-missing; on a cloud node or a team
cluster the prior PULL_BYTES_PER_S (an assumption until the lab's bench/vm_boot.py measures pulls: a
registry in or near the region serves ~0.5-1 Gbit/s, and a pull also decompresses and unpacks each layer
on one core, ~60 MB/s of compressed gzip layers).
"""
from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infra import capabilities, kind, runs_here
from orchestrator.settings import env_float

if TYPE_CHECKING:
    from infra.images.reference import ImageRef
    from infra.images.registry import ImageFacts
    from infra.images.runtime import Runtime

# compressed bytes per second a node pulls at (priors; see the docstring)
PULL_BYTES_PER_S = {"aws": 60e6, "gcp": 60e6, "cluster": 60e6}
LOCAL_PULL_ENV = "DLRUN_LOCAL_PULL_MB_S"
CLOUD_ARCH = "amd64"  # every machine image dlrun boots is x86_64 (configs/catalog/images.csv)


@dataclass
class ImagePlan:
    ref: ImageRef
    pull: str                                                        # always | if-missing
    facts: dict[str, ImageFacts] = field(default_factory=dict)       # arch -> the registry's facts
    missing: dict[str, str] = field(default_factory=dict)            # arch -> why there is no build for it
    runtime: Runtime | None = None                                   # this machine's, when a local offer is in play
    local_cached: bool = False                                       # this machine's runtime holds the image


def offer_arch(offer) -> str:
    from infra.images.registry import node_arch

    return node_arch(platform.machine()) if runs_here(offer.cloud) else CLOUD_ARCH


def check_image(spec, offers) -> ImagePlan | None:
    """The image's facts for every architecture the offers need; DlrunError (one line) when it cannot run
    anywhere the job may go. The registry is read first: its answer (no such tag, no build for the
    platform, a login needed) is the real problem even where this machine has no container runtime."""
    if not spec.image:
        return None
    from infra.images.reference import parse_reference
    from orchestrator.errors import UsageError

    ref = parse_reference(spec.image)
    plan = ImagePlan(ref=ref, pull=spec.image_pull or "if-missing")
    able = [o for o in offers if capabilities(o.cloud).containers]
    if not able:
        clouds = ", ".join(sorted({o.cloud for o in offers})) or ", ".join(spec.resources.clouds)
        raise UsageError(f"{spec.name}: image {ref}: {clouds} cannot run a container image; add a cloud or "
                         "local to resources.clouds")
    plan.facts, plan.missing = read_registry(ref, sorted({offer_arch(o) for o in able}))
    if any(runs_here(o.cloud) for o in able):
        from infra.images.runtime import INSTALL_HINT, find_runtime, has_image

        plan.runtime = find_runtime()
        if plan.runtime.path is None and all(runs_here(o.cloud) for o in able):
            raise UsageError(f"{spec.name}: image {ref} runs in a container on this machine, and no container "
                             f"runtime works here ({plan.runtime.problem}); {INSTALL_HINT}")
        if plan.runtime.path and plan.pull == "if-missing":
            plan.local_cached = has_image(plan.runtime.path, ref.full)
    return plan


def read_registry(ref: ImageRef, archs: list[str]) -> tuple[dict[str, ImageFacts], dict[str, str]]:
    """The registry's facts per architecture, and why there is no build for the others; a missing image or
    repository, a login needed or refused: UsageError (exit 2), the registry's answer in one line; the
    registry unreachable or answering nonsense: ProvisioningFailedError (exit 5). No build for any: exit 2."""
    from infra.images.registry import ImageError, image_facts
    from orchestrator.errors import ProvisioningFailedError, UsageError

    facts: dict[str, ImageFacts] = {}
    missing: dict[str, str] = {}
    for arch in archs:
        try:
            facts[arch] = image_facts(ref, arch)
        except ImageError as e:
            if e.kind == "platform":
                missing[arch] = e.message
                continue
            if e.kind in ("unreachable", "bad_response"):
                raise ProvisioningFailedError(e.message) from None
            raise UsageError(e.message) from None
    if not facts:
        raise UsageError(next(iter(missing.values())))
    return facts, missing


def probe_image(spec) -> None:
    """Before the probe runs a job's image here (job_probe.py): the registry's answer for the build this
    machine runs and, where the job may go to a cloud, for linux/amd64 (a mistyped tag, a login needed:
    one line, exit 2, whether or not a container runtime works here)."""
    from infra.images.reference import parse_reference
    from infra.images.registry import node_arch
    from orchestrator.errors import UsageError

    ref = parse_reference(spec.image)
    here = node_arch(platform.machine())
    remote = any(not runs_here(c) for c in spec.resources.clouds)
    _, missing = read_registry(ref, sorted({here, CLOUD_ARCH} if remote else {here}))
    if here in missing:
        raise UsageError(f"{spec.name}: {missing[here]}, and without workload or reference dlrun times the job by "
                         "running it here in its image: add `workload:` or `reference:` to the job file")


def exclusion_reason(image: ImagePlan | None, spec, offer) -> str | None:
    """Why an offer cannot run the job's image, or None."""
    if image is None:
        return None
    if not capabilities(offer.cloud).containers:
        return f"{offer.cloud} does not run a container image (`image:`)"
    from infra.images.reference import is_local_registry

    if not runs_here(offer.cloud) and is_local_registry(image.ref.api_host):
        return (f"the image's registry {image.ref.registry} is on this machine, which a {offer.cloud} node "
                "cannot reach: push the image to a registry the node reaches")
    arch = offer_arch(offer)
    if arch in image.missing:
        return f"the image has no linux/{arch} build"
    if runs_here(offer.cloud) and image.runtime is not None and image.runtime.path is None:
        from infra.images.runtime import INSTALL_HINT

        return f"no container runtime works here ({image.runtime.problem}); {INSTALL_HINT}"
    if kind(offer.cloud) == "cluster":
        return cluster_image_reason(spec)
    return None


def cluster_image_reason(spec) -> str | None:
    """A team cluster runs an image through Ray's image_uri runtime env, which takes no other field but
    env_vars and config (Ray 2.60 runtime_env.py, ImageURIPlugin.get_compatible_keys): nothing can be
    shipped or installed beside it."""
    needs = [what for what, present in (("a built-in job (jobs/ is shipped)", bool(spec.job)),
                                        ("workdir (shipped as working_dir)", bool(spec.workdir)),
                                        ("requirements (pip)", bool(spec.requirements)),
                                        ("data: inputs (synced by dlrun's helper)", bool(spec.data))) if present]
    if needs:
        return ("Ray's image_uri ships nothing beside the image, and the job needs " + ", ".join(needs)
                + ": put it into the image")
    return None


def pull_bytes(image: ImagePlan | None, offer) -> int:
    """What a node of this offer downloads for the image (0: nothing, or already here)."""
    if image is None:
        return 0
    facts = image.facts.get(offer_arch(offer))
    if facts is None or (runs_here(offer.cloud) and image.local_cached):
        return 0
    return facts.compressed_bytes


def pull_seconds(cloud: str, nbytes: int) -> float:
    """Seconds a node of `cloud` takes to pull `nbytes` of compressed layers (the estimator's hook)."""
    if nbytes <= 0:
        return 0.0
    if runs_here(cloud):
        return nbytes / (env_float(LOCAL_PULL_ENV) * 1e6)
    return nbytes / PULL_BYTES_PER_S.get(kind(cloud), PULL_BYTES_PER_S["aws"])


def image_notes(image: ImagePlan | None, chosen) -> list[str]:
    if image is None:
        return []
    notes = []
    if chosen is not None:
        nbytes = pull_bytes(image, chosen.offer)
        facts = image.facts.get(offer_arch(chosen.offer))
        if nbytes:
            notes.append(f"the image's {_size(nbytes)} pull: ~{pull_seconds(chosen.offer.cloud, nbytes):.0f} s "
                         f"of the start-up ({image.ref}, linux/{facts.arch if facts else '?'}, "
                         f"{facts.layers if facts else 0} layers)")
        elif facts is not None:
            notes.append(f"the image {image.ref} is already on this machine (image_pull: if-missing): no pull")
        if kind(chosen.offer.cloud) == "cluster":
            notes.append("on a team cluster the job runs in the image through Ray's image_uri: its nodes need "
                         "podman, and the image the cluster's Ray and Python versions (dlrun cannot check either)")
            if chosen.checkpoint and "://" not in chosen.checkpoint:
                notes.append(f"the job's checkpoints ({chosen.checkpoint}, on the cluster's shared_path) are not in "
                             "its container: image_uri mounts only Ray's /tmp/ray, so they go with the container and "
                             "a lost cluster restarts the job from the start; checkpoint: s3://… or gs://… survives")
    for arch in image.missing:
        notes.append(f"no linux/{arch} build of the image: {arch} offers left out")
    return notes


def _size(nbytes: int) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.0f} MB"
