"""Rebuild configs/catalog/*.csv from the sourced facts in ../shared/catalog (run by hand).

GCP prices a GPU on top of its host VM: the two parts are kept in their own columns
(host_*, gpu_*), read from the provenance rule that produced each sum.
"""
import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2] / "shared" / "catalog"
PARTS = re.compile(r"host VM row \([^:]+: ([\d.]+)/([\d.]+)\) \+ GPU-only row \([^:]+: ([\d.]+)/([\d.]+)\)")
OLD_DATE, NEW_DATE = "2022-06-01", "2025-07-01"


def short_source(src: str) -> str:
    return re.sub(r"@([0-9a-f]{8})[0-9a-f]+", r"@\1", src)


def main() -> None:
    offers = list(csv.DictReader(open(SHARED / "offers.csv")))
    prov = list(csv.DictReader(open(SHARED / "offers_provenance.csv")))
    cols = ["cloud", "region", "instance_type", "accelerator", "accelerator_count", "gpu_memory_gb",
            "vcpus", "memory_gb", "price_per_hour", "spot_price_per_hour", "host_price_per_hour",
            "host_spot_price_per_hour", "gpu_price_per_hour", "gpu_spot_price_per_hour",
            "price_date", "source", "flags"]
    with open(HERE / "offers.csv", "w", newline="") as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        for o, p in zip(offers, prov):
            assert (o["cloud"], o["region"], o["instance_type"]) == (p["cloud"], p["region"], p["instance_type"])
            row = dict(o)
            old = "2022" in p["source"] or "OLD" in p["flags"] or "MIXED VINTAGE" in p["flags"]
            row["price_date"] = OLD_DATE if old else NEW_DATE
            row["source"] = short_source(p["source"])
            row["flags"] = p["flags"][:160]
            m = PARTS.search(p["price_rule"])
            if o["cloud"] == "gcp" and m:
                row.update(host_price_per_hour=m[1], host_spot_price_per_hour=m[2],
                           gpu_price_per_hour=m[3], gpu_spot_price_per_hour=m[4])
            w.writerow(row)


if __name__ == "__main__":
    main()
