"""How long `dlrun catalog refresh --cloud gcp` takes when one source fails for good, with the users' default
deadline (DLRUN_REFRESH_DEADLINE_S=60), against the fake Compute Engine and Cloud Billing behind the fault
proxy (tests/support/fault_proxy.py), as a ratio to a healthy refresh of the same world in the same process.
Issue 34: a machineTypes list answering 503 stalled the refresh ~600 s (google-api-core's default deadline).

    .venv/bin/python bench/catalog_refresh_faults.py [--gcp-regions 6]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gcp-regions", type=int, default=6)
    args = ap.parse_args()
    os.environ.update(DLRUN_HOME=tempfile.mkdtemp(prefix="dlrun-bench-"), GOOGLE_CLOUD_PROJECT="dlrun-test",
                      DLRUN_GCP_EMULATOR="1")
    os.environ.pop("DLRUN_REFRESH_DEADLINE_S", None)
    from click.testing import CliRunner

    from orchestrator.cli import plan as cli_plan
    from tests.support.catalog_world import gcp_world
    from tests.support.fault_proxy import FaultProxy

    gce, billing = gcp_world(args.gcp_regions)
    with gce, billing, FaultProxy(upstream=gce.endpoint) as gp, FaultProxy(upstream=billing.endpoint) as bp:
        os.environ.update(DLRUN_GCP_API_ENDPOINT=gp.endpoint, DLRUN_GCP_BILLING_ENDPOINT=bp.endpoint)

        def refresh() -> tuple[float, int, str]:
            t = time.perf_counter()
            r = CliRunner().invoke(cli_plan.catalog_group, ["refresh", "--cloud", "gcp"])
            code = getattr(r.exception, "exit_code", r.exit_code)
            return time.perf_counter() - t, code, r.output

        refresh()  # imports and first clients out of the way
        healthy, code, _ = refresh()
        print(f"healthy refresh: {healthy:.2f} s (exit {code})")
        for api, fault in (("machineTypes.aggregatedList", "http503"), ("services.skus.list", "http503"),
                           ("machineTypes.aggregatedList", "read_timeout"),  # held 3 s, then reset
                           ("regions.list", "throttled")):
            gp.clear(), bp.clear()
            (bp if api.startswith("services") else gp).inject(api, fault)
            took, code, out = refresh()
            line = next((x for x in out.splitlines() if "FAILED" in x), "")
            calls = (bp if api.startswith("services") else gp).hits.get(api, 0)
            print(f"{api} {fault}: {took:.2f} s = {took / healthy:.1f}x healthy, {calls} calls, exit {code}: "
                  f"{line[:150]}")


if __name__ == "__main__":
    main()
