"""A fake of the two AWS JSON APIs moto lacks, for the real boto3 clients pointed at it
(AWS_ENDPOINT_URL_SERVICE_QUOTAS / AWS_ENDPOINT_URL_PRICING, or endpoint_url):

    Service Quotas   ListServiceQuotas, ListAWSDefaultServiceQuotas (ServiceCode ec2), per region
    Price List Query GetProducts (ServiceCode AmazonEC2, FormatVersion aws_v1, TERM_MATCH filters)

Every request is validated against botocore's input shape and every answer against its output shape
(botocore.validate, as botocore.stub.Stubber does), so a call or a field the real API does not have fails.
Reproduced: the awsJson1_1 protocol (X-Amz-Target, the region from the SigV4 credential scope);
pagination (Service Quotas: 100 a page by default; GetProducts: MaxResults <= 100, NextToken); a quota
ListServiceQuotas leaves out whose default ListAWSDefaultServiceQuotas has (the notes in
/work/shared/notes/cloud-price-quota-apis.md); TooManyRequestsException (HTTP 400, dstack#2777's
throttling) and ThrottlingException for GetProducts; each PriceList item a JSON *string* shaped as in
awscli's examples/pricing/get-products.rst; server-side TERM_MATCH filtering (items for Windows,
Dedicated tenancy, SQL pre-installed and unused capacity reservations exist and are filtered out).
Not reproduced: signatures (not checked), other services and filter types, quota increase requests.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field

from tests.support.http import LocalHttpServer, QuietHandler

SQ_PAGE = 100
# the EC2 vCPU quotas as the real API names them (docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html)
EC2_VCPU_QUOTAS = {
    "L-1216C47A": ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", "Standard/OnDemand", 5.0),
    "L-34B43A08": ("All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", "Standard/Spot", 5.0),
    "L-DB2E81BA": ("Running On-Demand G and VT instances", "G/OnDemand", 0.0),
    "L-3819A6DF": ("All G and VT Spot Instance Requests", "G/Spot", 0.0),
    "L-417A185B": ("Running On-Demand P instances", "P/OnDemand", 0.0),
    "L-7212CCBC": ("All P4, P3 and P2 Spot Instance Requests", "P/Spot", 0.0),
    "L-C4BD4855": ("All P5 Spot Instance Requests", "P5/Spot", 0.0),
    "L-74FC7D96": ("Running On-Demand F instances", "F/OnDemand", 0.0),
    "L-88CF9481": ("All F Spot Instance Requests", "F/Spot", 0.0),
    "L-7295265B": ("Running On-Demand X instances", "X/OnDemand", 0.0),
    "L-E3A00192": ("All X Spot Instance Requests", "X/Spot", 0.0),
    "L-1945791B": ("Running On-Demand Inf instances", "Inf/OnDemand", 0.0),
    "L-B5D1601B": ("All Inf Spot Instance Requests", "Inf/Spot", 0.0),
    "L-2C3B7624": ("Running On-Demand Trn instances", "Trn/OnDemand", 0.0),
    "L-6B0D517C": ("All Trn Spot Instance Requests", "Trn/Spot", 0.0),
    "L-6E869C2A": ("Running On-Demand DL instances", "DL/OnDemand", 0.0),
    "L-85EED4F7": ("All DL Spot Instance Requests", "DL/Spot", 0.0),
}
FILLER = 140  # other EC2 quotas (EIPs, AMIs, ...), so that a region's list spans pages


@dataclass
class AwsApis(LocalHttpServer):
    applied: dict[str, dict[str, float]] = field(default_factory=dict)   # region -> code -> applied value
    hidden: set[str] = field(default_factory=set)                       # codes ListServiceQuotas leaves out
    price_items: list[dict] = field(default_factory=list)               # GetProducts items (dicts; sent as strings)
    calls: list[tuple[str, str]] = field(default_factory=list)          # (operation, region)
    _throttled: dict[str, int] = field(default_factory=dict)             # region or "pricing" -> calls left
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        LocalHttpServer.__init__(self, None)
        import botocore.session

        session = botocore.session.get_session()
        self._models = {"ServiceQuotasV20190624": session.get_service_model("service-quotas"),
                        "AWSPriceListService": session.get_service_model("pricing")}

    def make_handler(self):
        return _handler_for(self)

    def throttle(self, region: str, times: int = 100) -> None:
        """The next `times` calls in region ("pricing": GetProducts) are throttled."""
        self._throttled[region] = times

    def set_quota(self, region: str, code: str, value: float) -> None:
        self.applied.setdefault(region, {})[code] = float(value)

    # ---- operations
    def _quota(self, region: str, code: str, value: float) -> dict:
        name, klass, _ = EC2_VCPU_QUOTAS.get(code, (f"Other EC2 quota {code}", "", 0.0))
        q = {"ServiceCode": "ec2", "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
             "QuotaArn": f"arn:aws:servicequotas:{region}:123456789012:ec2/{code}", "QuotaCode": code,
             "QuotaName": name, "Value": value, "Unit": "None", "Adjustable": True, "GlobalQuota": False}
        if klass:
            q["UsageMetric"] = {"MetricNamespace": "AWS/Usage", "MetricName": "ResourceCount",
                                "MetricDimensions": {"Class": klass, "Resource": "vCPU", "Service": "EC2",
                                                     "Type": "Resource"},
                                "MetricStatisticRecommendation": "Maximum"}
        return q

    def _all_quotas(self, region: str, applied: bool) -> list[dict]:
        out = []
        for code, (_, _, default) in EC2_VCPU_QUOTAS.items():
            if applied and code in self.hidden:
                continue
            value = self.applied.get(region, {}).get(code, default) if applied else default
            out.append(self._quota(region, code, value))
        out += [self._quota(region, f"L-F{i:07X}", 5.0) for i in range(FILLER)]
        return out

    def operation(self, target: str, region: str, params: dict) -> dict:
        if target.endswith("ListServiceQuotas") or target.endswith("ListAWSDefaultServiceQuotas"):
            if params["ServiceCode"] != "ec2":
                return {"Quotas": []}
            items = self._all_quotas(region, target.endswith("ListServiceQuotas"))
            return _page(items, "Quotas", params, min(params.get("MaxResults", SQ_PAGE), SQ_PAGE))
        if target.endswith("GetProducts"):
            if params.get("ServiceCode") != "AmazonEC2" or params.get("FormatVersion", "aws_v1") != "aws_v1":
                raise _ApiError("InvalidParameterException", "unsupported service or format")
            wanted = {f["Field"].lower(): f["Value"] for f in params.get("Filters", [])}
            if any(f["Type"] != "TERM_MATCH" for f in params.get("Filters", [])):
                raise _ApiError("InvalidParameterException", "only TERM_MATCH is faked")
            items = [text for attrs, text in self._priced(wanted.get("regioncode"))
                     if all(attrs.get(k) == v for k, v in wanted.items())]
            return _page(items, "PriceList", params, min(params.get("MaxResults", 100), 100),
                         extra={"FormatVersion": "aws_v1"})
        raise _ApiError("UnknownOperationException", target)


    def _priced(self, region: str | None) -> list[tuple[dict, str]]:
        """The price items (lower-cased attributes, the JSON string sent), indexed by region once."""
        with self._lock:
            if getattr(self, "_index_of", None) is not self.price_items or len(self.price_items) != self._index_n:
                index: dict[str, list] = {}
                for i in self.price_items:
                    attrs = {k.lower(): v for k, v in i["product"]["attributes"].items()}
                    index.setdefault(attrs.get("regioncode", ""), []).append((attrs, json.dumps(i)))
                self._index, self._index_of, self._index_n = index, self.price_items, len(self.price_items)
        return self._index.get(region, []) if region else [x for v in self._index.values() for x in v]


class _ApiError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _page(items: list, key: str, params: dict, size: int, extra: dict | None = None) -> dict:
    start = int(params.get("NextToken") or 0)
    out = {**(extra or {}), key: items[start:start + size]}
    if start + size < len(items):
        out["NextToken"] = str(start + size)
    return out


def _handler_for(fake: AwsApis):
    from botocore.validate import validate_parameters

    class Handler(QuietHandler):
        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = self.headers.get("X-Amz-Target", "")
            prefix, _, op = target.partition(".")
            m = re.search(r"Credential=[^/]+/\d+/([^/]+)/", self.headers.get("Authorization", ""))
            region = m.group(1) if m else "us-east-1"
            model = fake._models.get(prefix)
            try:
                if model is None or op not in model.operation_names:
                    raise _ApiError("UnknownOperationException", target)
                params = json.loads(raw or b"{}")
                op_model = model.operation_model(op)
                validate_parameters(params, op_model.input_shape)  # a call the real API refuses fails here
                key = "pricing" if prefix == "AWSPriceListService" else region
                with fake._lock:
                    fake.calls.append((op, region))
                    left = fake._throttled.get(key, 0)
                    if left:
                        fake._throttled[key] = left - 1
                if left:
                    raise _ApiError("ThrottlingException" if key == "pricing" else "TooManyRequestsException",
                                    "Rate exceeded")
                body = fake.operation(target, region, params)
                validate_parameters(body, op_model.output_shape)
                status = 200
            except _ApiError as e:
                status, body = 400, {"__type": e.code, "message": str(e)}
            self.reply(status, json.dumps(body).encode(), "application/x-amz-json-1.1")

    return Handler
