"""The Ray Jobs API of one cluster: a thin layer over Ray's JobSubmissionClient."""
from __future__ import annotations

import time

TERMINAL_RAY_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")


class RayJobs:
    """The Ray Jobs API of one cluster (a thin layer over JobSubmissionClient)."""

    def __init__(self, address: str, headers: dict[str, str] | None = None):
        """headers: the cluster's bearer token; by default the one of dlrun's local head at address."""
        from ray.job_submission import JobSubmissionClient

        if headers is None:
            from infra.local.head import local_head_headers

            headers = local_head_headers(address)
        self.address = address
        self.client = JobSubmissionClient(address, headers=headers or None)

    def submit(self, *, entrypoint: str, submission_id: str, runtime_env: dict, metadata: dict,
               entrypoint_num_gpus: float | None = None, agent_wait_s: float = 120.0) -> str:
        # Ray job metadata values must be strings
        meta = {str(k): str(v) for k, v in metadata.items() if v is not None}
        deadline = time.monotonic() + agent_wait_s
        while True:
            try:
                return self.client.submit_job(entrypoint=entrypoint, submission_id=submission_id,
                                              runtime_env=runtime_env, metadata=meta,
                                              entrypoint_num_gpus=entrypoint_num_gpus)
            except RuntimeError as e:
                # a head that has just come up answers before its job agent is ready
                if "No available agent" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def status(self, submission_id: str) -> str:
        return str(self.client.get_job_status(submission_id).value)

    def info(self, submission_id: str):
        return self.client.get_job_info(submission_id)

    def logs(self, submission_id: str) -> str:
        return self.client.get_job_logs(submission_id)

    def stop(self, submission_id: str) -> bool:
        try:
            return self.client.stop_job(submission_id)
        except Exception:
            return False

    def list(self):
        return self.client.list_jobs()
