"""A job's log as dlrun keeps it on this machine ($DLRUN_HOME/logs/JOB.log while the job runs), read as
it grows."""
from __future__ import annotations

import time
from typing import Iterator

from orchestrator.paths import job_log_path
from orchestrator.state.db import Store


def read_log(store: Store, job_id: str, *, follow: bool = False, poll_s: float = 0.5) -> Iterator[str]:
    """The log's text in pieces: what it holds now and, with follow, what is added until the job ends.
    Each piece ends at a line's end while the job lives (a half-written line waits for its rest)."""
    saved = job_log_path(job_id)
    offset, partial = 0, b""
    while True:
        job = store.get_job(job_id)  # read before the file: nothing is missed
        ended = job is None or not job.live  # a job no longer in the store writes no more
        if saved.exists():
            with open(saved, "rb") as f:  # only what was added since the last read
                f.seek(offset)
                data = f.read()
            offset += len(data)
            data, partial = partial + data, b""
            cut = len(data) if ended else data.rfind(b"\n") + 1
            data, partial = data[:cut], data[cut:]
            if data:
                yield data.decode(errors="replace")
        if ended or not follow:
            return
        time.sleep(poll_s)
