"""A fake of the Cloud Billing Catalog API's SKU list (plain HTTP; dlrun calls it with `requests`):

    GET /v1/services/6F81-5844-456A/skus?currencyCode=USD&pageSize=N&pageToken=T

Reproduced (cloud.google.com/billing/docs/reference/rest/v1/services.skus/list and the Sku resource):
pagination (pageSize at most 5000, nextPageToken, "" on the last page), the Sku shape (name, skuId,
description, category {serviceDisplayName, resourceFamily, resourceGroup, usageType}, serviceRegions[],
pricingInfo[].pricingExpression {usageUnit, tieredRates[] {startUsageAmount, unitPrice {currencyCode,
units (a string), nanos}}}, serviceProviderName); descriptions as Google writes them ("N1 Predefined
Instance Core running in Americas", "Spot Preemptible ...", "Nvidia Tesla T4 GPU attached to Spot
Preemptible VMs running in ...") and SKUs dlrun must not mistake for a VM's price (commitments, custom
and sole-tenant cores, licenses, egress); a price in nanos only (units "0" or absent); an unknown service
(404); throttling (throttle(n): the next n calls answer 429 RESOURCE_EXHAUSTED).
Not reproduced: API keys and OAuth (not checked), currencies other than USD, other services.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlparse

from tests.support.http import LocalHttpServer, QuietHandler

COMPUTE = "6F81-5844-456A"
MAX_PAGE = 5000


def sku(sku_id: str, description: str, group: str, usage: str, regions: list[str], price: float,
        unit: str = "h", family: str = "Compute", nanos_only: bool = False) -> dict:
    units, nanos = int(price), round((price - int(price)) * 1e9)
    unit_price = {"currencyCode": "USD", "nanos": nanos} if nanos_only and units == 0 else \
        {"currencyCode": "USD", "units": str(units), "nanos": nanos}
    return {"name": f"services/{COMPUTE}/skus/{sku_id}", "skuId": sku_id, "description": description,
            "category": {"serviceDisplayName": "Compute Engine", "resourceFamily": family,
                         "resourceGroup": group, "usageType": usage},
            "serviceRegions": regions,
            "pricingInfo": [{"summary": "", "pricingExpression": {
                "usageUnit": unit, "displayQuantity": 1, "baseUnit": "s", "baseUnitConversionFactor": 3600,
                "tieredRates": [{"startUsageAmount": 0, "unitPrice": unit_price}]},
                "currencyConversionRate": 1, "effectiveTime": "2026-11-01T00:00:00Z"}],
            "serviceProviderName": "Google"}


@dataclass
class BillingCatalog(LocalHttpServer):
    skus: list[dict] = field(default_factory=list)
    calls: int = 0
    page_cap: int = MAX_PAGE  # the API may answer fewer than pageSize; lower it to make the list span pages
    _throttled: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self):
        LocalHttpServer.__init__(self, None)

    def throttle(self, times: int = 1) -> None:
        self._throttled = times

    def make_handler(self):
        fake = self

        class Handler(QuietHandler):
            def do_GET(self):
                url = urlparse(self.path)
                q = parse_qs(url.query)
                with fake._lock:
                    fake.calls += 1
                    throttled = fake._throttled > 0
                    fake._throttled -= 1 if throttled else 0
                if throttled:
                    status, body = 429, {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                                   "message": "Quota exceeded for quota metric 'Read requests'"}}
                elif url.path != f"/v1/services/{COMPUTE}/skus":
                    status, body = 404, {"error": {"code": 404, "status": "NOT_FOUND",
                                                   "message": f"Service not found: {url.path}"}}
                else:
                    size = min(int((q.get("pageSize") or [MAX_PAGE])[0]), fake.page_cap)
                    start = int((q.get("pageToken") or ["0"])[0] or 0)
                    page = fake.skus[start:start + size]
                    more = start + size < len(fake.skus)
                    status, body = 200, {"skus": page, "nextPageToken": str(start + size) if more else ""}
                self.reply(status, json.dumps(body).encode(), "application/json; charset=UTF-8")

        return Handler
