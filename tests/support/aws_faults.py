"""Inject EC2 failures at the botocore boundary, for tests of infra/aws.py under moto.

Two hooks, because moto itself answers requests from a `before-send` handler (every `before-send`
handler runs, so moto would still carry out a call whose answer we replace there):
- `fail_operation` answers at `before-call`: the request never reaches moto (or AWS), exactly like
  an EC2 call that failed and changed nothing. botocore raises the same ClientError as for AWS.
- `throttle_operation` answers at `before-send` with EC2's real XML error body and HTTP 503, so
  botocore's retry policy (backoff, then retry) runs for real. Use it on read-only operations only.
- `answer_error` answers at `before-send` with EC2's own XML error document (EC2_ERRORS holds EC2's
  wording), so botocore parses it and retries a throttling answer as for AWS; it points the answered
  request away from moto, so even a write operation changes nothing. Prefer it for new tests.
- `end_while_starting` lets RunInstances succeed, then ends the new instances in moto's backend with the
  StateReason EC2 gives (Server.InsufficientInstanceCapacity, Server.SpotInstanceTermination, ...).
  Not reproduced: moto rewrites the StateReason when the ended instance is terminated again (EC2 keeps it).
Register on a boto3.Session *before* the provider makes its clients (clients copy the session's
handlers), or on a client directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from botocore.awsrequest import AWSResponse


class SimulatedCrash(BaseException):
    """dlrun killed at this point (think SIGKILL): a BaseException, so no launch cleanup catches it."""


@dataclass
class FaultLog:
    """What the fault saw, in order: (availability zone or '', injected?)."""

    calls: list[tuple[str, bool]] = field(default_factory=list)

    @property
    def injected(self) -> int:
        return sum(1 for _, hit in self.calls if hit)


class _Raw:
    def __init__(self, body: bytes):
        self._body = body

    def stream(self, **_):
        yield self._body


def _events(target):
    return target.meta.events if hasattr(target, "meta") else target.events


class _Budget:
    def __init__(self, times: int | None):
        self.left = times

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def fail_operation(target, operation: str, code: str, *, zones: set[str] | None = None,
                   times: int | None = None, after: int = 0, message: str = "",
                   status: int = 400) -> FaultLog:
    """EC2 `operation` fails with `code`: only in `zones` when given, letting the first `after`
    matching calls through, then failing `times` times (always, when None)."""
    log, budget, passes = FaultLog(), _Budget(times), _Budget(after)

    def handler(params, **_):
        body = params.get("body") if isinstance(params.get("body"), dict) else {}
        zone = body.get("Placement.AvailabilityZone", "")
        matches = zones is None or zone in zones
        hit = matches and not (after and passes.take()) and budget.take()
        log.calls.append((zone, hit))
        if not hit:
            return None
        http = AWSResponse(params.get("url", ""), status, {}, _Raw(b""))
        return http, {"Error": {"Code": code, "Message": message or f"injected {code}"},
                      "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": f"injected-{code}"}}

    _events(target).register(f"before-call.ec2.{operation}", handler)
    return log


def fail_run_instances(target, code: str, **kw) -> FaultLog:
    return fail_operation(target, "RunInstances", code, **kw)


def throttle_operation(target, operation: str, *, times: int, code: str = "RequestLimitExceeded") -> FaultLog:
    """The next `times` HTTP sends of a read-only `operation` get EC2's throttling answer (503)."""
    log, budget = FaultLog(), _Budget(times)

    def handler(request, **_):
        hit = budget.take()
        log.calls.append(("", hit))
        if not hit:
            return None
        body = (f'<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code>'
                f'<Message>Request limit exceeded.</Message></Error></Errors>'
                f'<RequestID>injected-throttle</RequestID></Response>').encode()
        return AWSResponse(request.url, 503, {"Content-Type": "text/xml"}, _Raw(body))

    # register_first: ours must be the first non-None answer, ahead of moto's own before-send handler
    _events(target).register_first(f"before-send.ec2.{operation}", handler)
    return log


def crash_after(target, operation: str = "RunInstances", *, after_calls: int = 1, service: str = "ec2") -> FaultLog:
    """Raise SimulatedCrash once `operation` has succeeded `after_calls` times (its effect stays)."""
    log = FaultLog()

    def handler(http_response, parsed, **_):
        log.calls.append(("", True))
        if len(log.calls) >= after_calls and http_response.status_code < 300:
            raise SimulatedCrash(f"killed right after {operation}")

    _events(target).register(f"after-call.{service}.{operation}", handler)
    return log


# EC2's own answers, word for word, for the errors dlrun scopes (docs.aws.amazon.com/AWSEC2/latest/APIReference/
# errors-overview.html and what RunInstances returns; the EC2 query protocol's XML error body, HTTP 400).
EC2_ERRORS = {
    "VcpuLimitExceeded": "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the "
                         "instance bucket that the specified instance type belongs to. Please visit "
                         "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.",
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "InstanceLimitExceeded": "Your quota allows for 0 more running instance(s). You requested at least 1.",
    "InsufficientInstanceCapacity": "We currently do not have sufficient g4dn.xlarge capacity in the Availability "
                                    "Zone you requested (us-east-1a). Our system will be working on provisioning "
                                    "additional capacity. You can currently get g4dn.xlarge capacity by not "
                                    "specifying an Availability Zone in your request or choosing us-east-1b, "
                                    "us-east-1c, us-east-1d, us-east-1f.",
    "RequestLimitExceeded": "Request limit exceeded.",
    "Throttling": "Rate exceeded",
}


def _ec2_error_body(code: str, message: str) -> bytes:
    from xml.sax.saxutils import escape

    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
            f'<Message>{escape(message)}</Message></Error></Errors><RequestID>injected-{code}</RequestID>'
            f'</Response>').encode()


def answer_error(target, operation: str, code: str, *, message: str | None = None, status: int = 400,
                 zones: set[str] | None = None, times: int | None = None) -> FaultLog:
    """EC2 answers `operation` with its XML error body (HTTP `status`): botocore parses it (and retries a
    throttling answer) exactly as a real one, and the request changes nothing in the fake. Only in `zones`
    (read from the request's Placement.AvailabilityZone) when given.

    Every before-send handler runs and the first answer wins, so moto's handler (after ours) would still
    carry the request out: ours points the answered request at an address moto does not serve, and moto
    lets it pass. Safe on write operations too (RunInstances makes no instance when refused)."""
    from urllib.parse import parse_qs

    log, budget = FaultLog(), _Budget(times)
    body = _ec2_error_body(code, message if message is not None else EC2_ERRORS.get(code, code))

    def handler(request, **_):
        raw = request.body.decode() if isinstance(request.body, bytes) else (request.body or "")
        zone = (parse_qs(raw).get("Placement.AvailabilityZone") or [""])[0]
        hit = (zones is None or zone in zones) and budget.take()
        log.calls.append((zone, hit))
        if not hit:
            return None
        url, request.url = request.url, "https://fault-injected.invalid/"  # moto: not mine, not carried out
        return AWSResponse(url, status, {"Content-Type": "text/xml"}, _Raw(body))

    _events(target).register_first(f"before-send.ec2.{operation}", handler)
    return log


def end_while_starting(target, region: str, code: str = "Server.InsufficientInstanceCapacity", *,
                       message: str = "", zones: set[str] | None = None) -> FaultLog:
    """Instances that RunInstances accepted end before they run, as EC2 ends them when the capacity it
    promised is not there after all: the instance goes to `terminated` with StateReason `code`
    (API_StateReason: Server.InsufficientInstanceCapacity, Server.SpotInstanceTermination, ...). Done to
    moto's own instances (its backend, in this process), so DescribeInstances tells it as EC2 does."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    log = FaultLog()
    text = message or f"{code}: Insufficient capacity to satisfy your request"

    def handler(http_response, parsed, **_):
        if http_response.status_code >= 300:
            return
        backend = ec2_backends[DEFAULT_ACCOUNT_ID][region]
        for inst in parsed.get("Instances", []):
            zone = inst.get("Placement", {}).get("AvailabilityZone", "")
            hit = zones is None or zone in zones
            log.calls.append((zone, hit))
            if hit:
                backend.terminate_instances([inst["InstanceId"]])
                ended = backend.get_instance(inst["InstanceId"])
                ended.state_reason = StateReason(text, code)
                ended._reason = text

    _events(target).register("after-call.ec2.RunInstances", handler)
    return log
