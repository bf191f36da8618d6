"""Where a candidate's checkpoints live, decided at plan time (no cloud call).

A cloud node's disk is deleted with the node, so a run that may need a second attempt there (spot,
or max_restarts_on_errors) keeps its checkpoints in a bucket its nodes can reach with their scoped
credentials: the job's `checkpoint:` when it is such a bucket, else dlrun's per-owner run bucket of
that cloud and region. A candidate that can have neither is excluded with the reason. A local
directory as `checkpoint:` cannot serve a cloud node at all: that is a mistake in the job file.
"""
from __future__ import annotations

from infra import capabilities
from infra.identity import owner_identity
from infra.storage import bucket_for_every_run, node_scheme, run_bucket_url
from orchestrator.errors import SpecError

NODE_DISK = "~/.dlrun/checkpoints"  # on the node itself: a single on-demand attempt only


def scheme_of(location: str | None) -> str:
    return location.split("://", 1)[0].lower() if location and "://" in location else ""


def check_checkpoint(spec) -> None:
    """Exit 2 when `checkpoint:` is a local directory and the job may run on a cloud."""
    if not spec.checkpoint or scheme_of(spec.checkpoint) not in ("", "file"):
        return
    # a team cluster (not provisioned by dlrun) may share a directory with this machine: its candidates say
    remote = [c for c in spec.resources.clouds if capabilities(c).remote and capabilities(c).provisioned]
    if remote:
        raise SpecError(f"{spec.name}: checkpoint: {spec.checkpoint} is a directory on this machine, which "
                        f"nodes on {', '.join(remote)} cannot reach (their disks go with them): use "
                        "s3://BUCKET/PREFIX or gs://BUCKET/PREFIX, remove checkpoint: to let dlrun use its "
                        "own bucket, or set resources.clouds: [local]")


def candidate_checkpoint(spec, offer, spot: bool, owner: str) -> tuple[str | None, str | None]:
    """(checkpoint base for this candidate, None) or (None, why the candidate is excluded).

    The base of a local candidate is None (the job's directory, as before)."""
    if not capabilities(offer.cloud).remote:
        return None, None
    if offer.extra.get("cluster"):
        return cluster_checkpoint(spec, offer)
    needs_bucket = spot or spec.max_restarts_on_errors > 0
    scheme = node_scheme(offer.cloud)
    if spec.checkpoint:
        given = scheme_of(spec.checkpoint)
        if scheme == given:
            return spec.checkpoint.rstrip("/"), None
        reach = f"they get {scheme}:// credentials only" if scheme else "they get no storage credentials yet"
        return None, f"checkpoint {spec.checkpoint} is out of reach of {offer.cloud} nodes ({reach})"
    bucket = run_bucket_url(offer.cloud, offer.region, owner) if scheme else None
    if bucket and (needs_bucket or bucket_for_every_run(offer.cloud)):
        return bucket, None
    if needs_bucket:
        why = "spot" if spot else "max_restarts_on_errors"
        return None, (f"{why} needs checkpoints in a bucket and dlrun has none on {offer.cloud} yet "
                      "(its nodes get no storage credentials)")
    return NODE_DISK, None


def cluster_checkpoint(spec, offer) -> tuple[str | None, str | None]:
    """A team cluster's checkpoints: the job's bucket, or a directory under the cluster's shared_path (which
    its nodes and this machine both mount); anything else cannot serve a recovery there."""
    from pathlib import Path

    name, shared = offer.extra["cluster"], offer.extra.get("shared_path") or ""
    given = spec.checkpoint
    if given and scheme_of(given) in ("s3", "gs"):
        return given.rstrip("/"), None
    fix = (f"set checkpoint: s3://BUCKET/PREFIX or gs://BUCKET/PREFIX in the job, or clusters.{name}.shared_path "
           "in config.yaml to a directory every node mounts")
    if given:
        path = Path(given.removeprefix("file://")).expanduser()
        if shared and path.is_relative_to(shared):
            return str(path), None
        return None, f"checkpoint {given} is out of reach of cluster {name}'s nodes (not under its shared_path); {fix}"
    if shared:
        return f"{shared.rstrip('/')}/dlrun-checkpoints/{spec.name}", None
    return None, f"cluster {name} has no checkpoint location its nodes can reach; {fix}"


def storage_notes(chosen) -> list[str]:
    """The plan names the bucket the chosen candidate's checkpoints go to."""
    if chosen is None or not chosen.checkpoint:
        return []
    from infra.storage import expiry_days

    cloud, region = chosen.offer.cloud, chosen.offer.region
    if chosen.checkpoint == NODE_DISK:
        return [f"checkpoints on the {cloud} node's own disk (one attempt; gone with the node)"]
    if chosen.checkpoint == run_bucket_url(cloud, region, owner_identity()):
        return [f"checkpoints in {chosen.checkpoint} (dlrun's bucket for you in {region}, made on first use; "
                f"runs expire after {expiry_days(cloud)} days)"]
    return [f"checkpoints in {chosen.checkpoint}"]
