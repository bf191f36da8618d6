"""The preemption notice: watched on the node, acted on by the job.

A spot VM is warned before it is taken: AWS posts `spot/instance-action` in the instance metadata
(about two minutes ahead), GCP sets `instance/preempted` to TRUE (about thirty seconds ahead).

On the node, dlrun runs a cloud job's command through this module:

    python -m jobs.notice --cloud aws -- python -u -m jobs.cnn ...

which starts the command in its own process group, polls the metadata service, and on notice
writes the flag file ($DLRUN_NOTICE_FILE), gives the job GRACE_S to stop on it, then sends SIGTERM to
the command's process group. It also passes a SIGTERM/SIGINT it gets itself (Ray stopping the job)
on to that group.

In the job (the built-in jobs do this; a user script can too):

    from jobs.notice import PreemptionNotice
    notice = PreemptionNotice.install()      # SIGTERM now sets a flag instead of killing
    for step ...:
        ...
        if notice.pending:                   # checkpoint at once, say so, exit
            store.save(state, epoch, step)
            notice.stopped(epoch=epoch, step=step, checkpoint=store.location)

`notice.stopped` prints the DLRUN_METRIC event dlrun records ("preempted with notice, checkpoint
at epoch E step S") and exits with NOTICE_EXIT.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

NOTICE_FILE_ENV = "DLRUN_NOTICE_FILE"
METADATA_URL_ENV = "DLRUN_METADATA_URL"  # the metadata service (default: the link-local address both clouds use)
METADATA_URL = "http://169.254.169.254"
NOTICE_EXIT = 75  # EX_TEMPFAIL: stopped on a preemption notice, with a checkpoint
AWS_TOKEN_TTL_S = 21600
POLL_S = 2.0  # AWS suggests checking every 5 s for its two-minute warning; GCP's is only 30 s
# after the notice, how long the job has to stop on the flag file before its process group gets SIGTERM
GRACE_S = {"aws": 60.0, "gcp": 15.0}


def _request(url: str, *, method: str = "GET", headers: dict[str, str], timeout: float) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def check_aws(base: str, timeout: float = 2.0) -> str | None:
    """IMDSv2: a session token (PUT), then spot/instance-action: 404 until a notice is posted.
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html"""
    status, token = _request(f"{base}/latest/api/token", method="PUT", timeout=timeout,
                             headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)})
    if status != 200:
        return None
    status, body = _request(f"{base}/latest/meta-data/spot/instance-action", timeout=timeout,
                            headers={"X-aws-ec2-metadata-token": token})
    if status != 200 or not body.strip():
        return None
    try:
        data = json.loads(body)
        return f"spot instance-action {data.get('action', '?')} at {data.get('time', '?')}"
    except ValueError:
        return f"spot instance-action {body.strip()[:80]}"


def check_gcp(base: str, timeout: float = 2.0) -> str | None:
    """instance/preempted is FALSE until the VM is being preempted.
    https://cloud.google.com/compute/docs/instances/create-use-preemptible#detecting_if_an_instance_was_preempted"""
    status, body = _request(f"{base}/computeMetadata/v1/instance/preempted", timeout=timeout,
                            headers={"Metadata-Flavor": "Google"})
    return "instance/preempted TRUE" if status == 200 and body.strip().upper() == "TRUE" else None


CHECKS = {"aws": check_aws, "gcp": check_gcp}


def check(cloud: str, base: str | None = None) -> str | None:
    """The notice, if one is posted now (None also when the metadata service does not answer)."""
    base = (base or os.environ.get(METADATA_URL_ENV) or METADATA_URL).rstrip("/")
    try:
        return CHECKS[cloud](base)
    except (OSError, urllib.error.URLError):
        return None


def watch(cloud: str, on_notice, *, stop: threading.Event, interval_s: float = POLL_S) -> None:
    """Poll until a notice (then on_notice(reason), once) or until `stop` is set."""
    while not stop.is_set():
        reason = check(cloud)
        if reason:
            on_notice(reason)
            return
        stop.wait(interval_s)


# --- the job's side ------------------------------------------------------------------------------

class PreemptionNotice:
    """SIGTERM (from the node's watcher) sets `pending`; so does the flag file appearing."""

    def __init__(self, flag_file: str | None = None):
        self.flag_file = flag_file if flag_file is not None else os.environ.get(NOTICE_FILE_ENV, "")
        self._signalled = False
        self._previous = None

    @classmethod
    def install(cls) -> "PreemptionNotice":
        notice = cls()
        if threading.current_thread() is threading.main_thread():
            notice._previous = signal.signal(signal.SIGTERM, notice._on_sigterm)
        return notice

    def uninstall(self) -> None:
        """SIGTERM does what it did before install() (for callers that train in-process)."""
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_sigterm(self, signum, frame) -> None:
        self._signalled = True

    @property
    def pending(self) -> bool:
        return self._signalled or bool(self.flag_file and os.path.exists(self.flag_file))

    def stopped(self, **where) -> None:
        """Say where the checkpoint is (dlrun records it), then exit with NOTICE_EXIT."""
        from jobs.metrics import report_event

        report_event("preempted_notice", **where)
        raise SystemExit(NOTICE_EXIT)


# --- the node's side: python -m jobs.notice --cloud aws -- COMMAND ... ----------------------------

def run(cloud: str, command: list[str], *, interval_s: float = POLL_S, grace_s: float | None = None) -> int:
    grace_s = GRACE_S[cloud] if grace_s is None else grace_s
    flag = os.environ.get(NOTICE_FILE_ENV) or str(
        Path(tempfile.gettempdir()) / f"dlrun-notice-{os.environ.get('DLRUN_JOB_ID', os.getpid())}")
    Path(flag).unlink(missing_ok=True)  # a flag left by an earlier attempt on this disk is not news
    child = subprocess.Popen(command, start_new_session=True, env={**os.environ, NOTICE_FILE_ENV: flag})

    def signal_group(signum: int) -> None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    def on_notice(reason: str) -> None:
        Path(flag).write_text(reason + "\n")
        print("DLRUN_METRIC " + json.dumps({"event": "preemption_notice", "reason": reason}), flush=True)
        # the flag first: a process that called ray.init() (jobs.metrics does, inside a Ray job) has Ray's
        # own SIGTERM handler, which ends it at once, without its checkpoint
        deadline = time.monotonic() + grace_s
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        signal_group(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: signal_group(signum))
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(cloud, on_notice), kwargs={"stop": stop, "interval_s": interval_s},
                               daemon=True, name="dlrun-notice")
    watcher.start()
    try:
        code = child.wait()
    finally:
        stop.set()
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.notice",
                                description="Run COMMAND; on a preemption notice, SIGTERM its process group.")
    p.add_argument("--cloud", choices=sorted(CHECKS), required=True)
    p.add_argument("--interval", type=float, default=POLL_S, help="seconds between metadata checks")
    p.add_argument("--grace", type=float, default=None,
                   help="seconds the job has to stop on the flag file before SIGTERM (default: aws 60, gcp 15)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        p.error("no COMMAND given (python -m jobs.notice --cloud aws -- COMMAND ...)")
    return run(a.cloud, command, interval_s=a.interval, grace_s=a.grace)


if __name__ == "__main__":
    sys.exit(main())
