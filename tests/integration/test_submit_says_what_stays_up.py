"""After a job on this machine, `dlrun submit` says that the Ray head it started stays up, and how to stop it
(orchestrator/cli/main.head_left_up); after a cloud job, nothing (its cluster is gone). The head is a stand-in
answering the dashboard's /api/version as a head with token authentication does (401)."""
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from orchestrator.cli.main import head_left_up
from orchestrator.state.db import default_store
from orchestrator.states import JobStatus
from tests.support.store_records import running_local_job


class _TokenHead(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802  (http.server's name)
        self.send_response(401)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_local_job_leaves_the_head_up_and_says_how_to_stop_it(dlrun_home):
    server = HTTPServer(("127.0.0.1", 0), _TokenHead)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        (dlrun_home / "local_head.json").write_text(json.dumps({  # as infra/local/head.py records its head
            "dashboard_url": url, "gcs_address": "127.0.0.1:6379", "pgid": os.getpgrp(), "started_by_dlrun": True}))
        store = default_store()
        job_id = running_local_job(store, supervisor_pid=None, ray_address=url)
        store.finish(job_id, JobStatus.SUCCEEDED, "", actual_seconds=5.0)
        assert head_left_up(store, job_id) == (f"the local Ray head stays up for the next job and its dashboard "
                                               f"({url}); `dlrun down` stops it")
    finally:
        server.shutdown()


def test_a_cloud_job_leaves_nothing_to_say(dlrun_home):
    store = default_store()
    job_id = store.create_job(name="t", spec_hash="h", spec_json="{}")
    store.start_attempt(job_id, attempt=1, backend="aws", offer_key="aws/us-east-1/g4dn.xlarge",
                        instance_type="g4dn.xlarge", accelerator="T4", accelerator_count=1, spot=False,
                        price_per_hour=0.5, price_date=None, cluster_id="c-aws")
    assert head_left_up(store, job_id) == ""
