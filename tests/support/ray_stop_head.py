"""A stand-in for a Ray head's Jobs API stop endpoint, POST /api/jobs/{job_or_submission_id}/stop, on a free port.

Reproduces (Ray 2.60, dashboard/modules/job/job_head.py `stop_job` and job_manager.py `JobManager.stop_job`):
an unknown id answers 404 "Job {id} does not exist"; a known job answers 200 {"stopped": true} while it runs
(its supervisor actor is alive) and {"stopped": false} once it has ended or was stopped (the actor is gone).
Not reproduced: the token check, driver (non-submission) jobs' 400, the 500 of an unreachable job agent, and
every other endpoint (404)."""
from __future__ import annotations

import json

from tests.support.http import LocalHttpServer, QuietHandler

STOP_PATH = "/api/jobs/{}/stop"


class RayStopHead(LocalHttpServer):
    def __init__(self, running: set[str] | None = None, ended: set[str] | None = None):
        super().__init__(QuietHandler)
        self.running = set(running or ())
        self.ended = set(ended or ())
        self.stop_requests: list[str] = []  # the ids asked to stop, in order

    def make_handler(self):
        head = self

        class Handler(QuietHandler):
            def do_POST(self):
                prefix, suffix = STOP_PATH.split("{}")
                if not (self.path.startswith(prefix) and self.path.endswith(suffix)):
                    return self.reply(404, b"Not Found", "text/plain")
                job = self.path[len(prefix):-len(suffix)]
                head.stop_requests.append(job)
                if job not in head.running | head.ended:
                    return self.reply(404, f"Job {job} does not exist".encode(), "text/plain")
                stopped = job in head.running
                head.running.discard(job)
                head.ended.add(job)
                return self.reply(200, json.dumps({"stopped": stopped}).encode(), "application/json")

        return Handler
