"""Store records seeded the way dlrun's own lifecycle writes them, for tests of what reads them."""
from __future__ import annotations

import time

from orchestrator.state.db import Store
from orchestrator.states import JobStatus


def running_local_job(store: Store, *, supervisor_pid: int | None, ray_address: str | None = None) -> str:
    """A RUNNING local job on the recorded cluster c-local; with ray_address, its Ray job dlrun-<id>-1 there."""
    job_id = store.create_job(name="local", spec_hash="h", spec_json="{}")
    store.set_supervisor(job_id, supervisor_pid)
    store.start_attempt(job_id, attempt=1, backend="local", offer_key="local/here/cpu", instance_type=None,
                        accelerator="CPU", accelerator_count=0, spot=False, price_per_hour=0.0, price_date=None,
                        cluster_id="c-local")
    store.cluster_launching("c-local", provider="local", job_id=job_id, region=None, instance_type=None,
                            spot=False, num_nodes=1, price_per_hour=0.0, launched_at=time.time())
    if ray_address is not None:
        store.mark_submitted(job_id, f"dlrun-{job_id}-1", ray_address)
    store.set_status(job_id, JobStatus.RUNNING)
    return job_id
