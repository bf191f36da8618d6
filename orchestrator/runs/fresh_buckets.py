"""`--fresh` in dlrun's own buckets: a cloud attempt of a job without `checkpoint:` keeps its checkpoints
under runs/<name>/<run key>/ of the owner's run bucket in the region it first ran in, so starting the run
over removes that prefix (and only it) in each of the owner's run buckets, on each cloud whose candidates
in the plan would use one."""
from __future__ import annotations

from orchestrator.errors import CloudCredentialsError, ProvisioningFailedError


def bucket_clouds(spec, plan=None) -> list[str]:
    """The clouds whose attempts of this job would keep checkpoints in dlrun's bucket."""
    from infra.storage import node_scheme

    if spec.checkpoint:
        return []  # the job's own location holds every attempt's checkpoints
    if plan is None:
        return [c for c in spec.resources.clouds if node_scheme(c)]
    return sorted({c.offer.cloud for c in plan.candidates
                   if c.checkpoint and "://" in c.checkpoint and node_scheme(c.offer.cloud)})


def clear_run_buckets(spec, key: str, plan=None) -> list[int]:
    """Remove the run's prefix in dlrun's buckets; the checkpoint epochs that were there."""
    from infra import get_provider
    from infra.base import CredentialsError, ProviderError
    from infra.identity import owner_identity
    from jobs.checkpoint import point_of

    epochs: set[int] = set()
    for cloud in bucket_clouds(spec, plan):
        try:
            cleared = get_provider(cloud).clear_run_prefix(owner_identity(), f"{spec.name}/{key}")
        except CredentialsError as e:
            raise CloudCredentialsError(f"--fresh: cannot clear this run's checkpoints in dlrun's {cloud} "
                                        f"bucket: {e.message}") from None
        except ProviderError as e:
            raise ProvisioningFailedError(f"--fresh: clearing this run's checkpoints in dlrun's {cloud} bucket "
                                          f"failed: {e.message}") from None
        epochs |= {p[0] for names in cleared.values() for n in names if (p := point_of(n))}
    return sorted(epochs)
