"""Readers of the clouds' own price, offer and quota APIs, and the cache they fill.

DESIGN.md puts these in infra/aws/pricing.py, infra/aws/quotas.py, infra/gcp/pricing.py and
infra/gcp/quotas.py. They live here instead, one package for both clouds, only so that this work did
not collide with the parallel work in infra/aws/ and infra/gcp/ (issue 24); moving them is a rename.

    sources.py      per cloud: its price kinds, credentials check, clients, quota reads (one table)
    cache.py        $DLRUN_HOME/catalog/*.json: every unit (cloud, kind, region) with its fetch time,
                    source and status; lifetimes per kind; a unit that fails keeps its previous rows
    bounds.py       each source's deadline, the calls' timeouts, boto3's adaptive retries, google's Retry
    answers.py      what an answer must hold (ShapeError, UnreadableAnswer) and a failure in one line
    quotas.py       the Quota record, which quotas an offer draws on, and whether it can launch now
    credentials.py  whether a cloud's credentials are configured at all (cheaply, no network)
    aws_buckets.py  EC2 instance type -> vCPU quota code and name (a view of infra/aws/quotas.py)
    aws_quotas.py   Service Quotas (EC2 vCPU buckets) + running instances (usage), per region
    gcp_quotas.py   regions.list quotas (per GPU type, PREEMPTIBLE_*, CPUS) and projects.get
    zones.py        GCP zones per region and per GPU, for the launch order
    build.py        offers (and zone tables) from the cached API responses
    aws_prices.py   Price List Query API, spot price history, offerings, instance types (GpuInfo)
    gcp_prices.py   Cloud Billing Catalog SKUs, acceleratorTypes and machineTypes aggregated lists

None of these modules is imported by `dlrun --help`; each imports its SDK inside its functions.
"""
