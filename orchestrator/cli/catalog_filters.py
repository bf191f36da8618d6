"""`dlrun catalog`'s filters (a GPU with its count as the table prints it, a region, the words for them) and its
table at the terminal's width: retired offers marked, the prices' dates and age said."""
from __future__ import annotations

from orchestrator.errors import UsageError


def suggest(word: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, known, n=3, cutoff=0.5) or \
        difflib.get_close_matches(word.lower(), [k.lower() for k in known], n=3, cutoff=0.5)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def gpu_key(name: str) -> str:
    """A GPU's name as the filter compares it: gpus.csv's canonical name (aliases folded), else the offer's own
    (a GPU type a refresh found that gpus.csv does not list yet, e.g. B200), upper-cased."""
    from infra.catalog import canonical_gpu

    return canonical_gpu(name) or name.upper()


def known_gpu(gpu: str, offers) -> tuple[str, int | None]:
    """--gpu: any GPU `dlrun catalog` prints (gpus.csv's, or an offer's), optionally with its count as printed
    (8×B200, 8xB200) or as a job file writes it (B200:8, B200x8)."""
    import re

    m = re.fullmatch(r"(.+?)(?:\s*[×xX:]\s*(\d+))?", gpu.strip())
    name, count = (m.group(1), int(m.group(2)) if m.group(2) else None) if m else (gpu, None)
    first = re.fullmatch(r"(\d+)\s*[×xX]\s*(.+)", gpu.strip())  # the count first, as dlrun prints it
    if first:
        name, count = first.group(2), int(first.group(1))
    offered = {gpu_key(o.accelerator) for o in offers if o.accelerator}
    tries = ((name, count), (gpu.strip(), None))  # "MI300X" is a name, not MI300 x nothing; "RTX4090" not RT x 4090
    for candidate, n in tries:
        if gpu_key(candidate) in offered:
            return gpu_key(candidate), n
    from infra.catalog import canonical_gpu, gpu_names

    for candidate, n in tries:
        if canonical_gpu(candidate) is not None:  # known, offered nowhere: the caller says so
            return gpu_key(candidate), n
    names = list(dict.fromkeys([*gpu_names(), *sorted(offered)]))
    near = suggest(gpu.strip().upper(), names) or suggest(name.upper(), names)
    raise UsageError(f"--gpu: unknown GPU '{gpu}'{near} (known: {', '.join(names)})")


def known_region(region: str, cloud: str | None, offers) -> None:
    regions = sorted({o.region for o in offers if cloud is None or o.cloud == cloud})
    if region in regions:
        return
    elsewhere = sorted({o.cloud for o in offers if o.region == region})
    if elsewhere:
        raise UsageError(f"--region: '{region}' is a {'/'.join(elsewhere)} region, not {cloud}'s; "
                         f"drop --cloud or pick one of: {', '.join(regions)}")
    raise UsageError(f"--region: no{f' {cloud}' if cloud else ''} region '{region}' in the catalog"
                     f"{suggest(region, regions)} (regions: {', '.join(regions)})")


def filters_text(gpu, cloud, region) -> str:
    parts = [f"GPU {gpu}" if gpu else "", f"cloud {cloud}" if cloud else "", f"region {region}" if region else ""]
    return ", ".join(p for p in parts if p)


def not_offered(gpu: str, want: str, count: int | None, offers, has_gpu) -> str:
    """Where a known GPU is offered when the filters leave nothing: the regions, the counts it comes in, or
    that no cloud offers it."""
    where = sorted({f"{o.cloud} {o.region}" for o in offers if has_gpu(o)})
    if where:
        return f"{gpu} is offered in: {', '.join(where)}"
    counts = sorted({o.accelerator_count for o in offers if o.accelerator and gpu_key(o.accelerator) == want})
    if counts:
        return f"{want} comes as {', '.join(f'{n}×{want}' for n in counts)}, not {count}×{want}"
    return f"{gpu} is in dlrun's GPU table, but no cloud of the catalog offers it (this machine's is planned as local)"


def catalog_table(offers, width: int):
    """The offers as a table that fits `width` (GPU GB, RAM, vCPU, GCP's host/GPU split and the spot price's
    own date are left out first), and the footer lines: what '†' marks, how old the prices are."""
    import time

    from infra.software import retirement
    from orchestrator.cli.render.fit import Col, fit_table
    from orchestrator.cli.render.plan_table import gpu_config
    from orchestrator.cli.render.summary import plural

    cols = [Col("cloud"), Col("region"), Col("instance", free=True), Col("GPU"), Col("GPU GB", True, spare=4),
            Col("vCPU", True, spare=3), Col("RAM GB", True, spare=5), Col("$/h", True), Col("spot $/h", True),
            Col("priced"), Col("spot priced", spare=2), Col("GCP host + GPU $/h", True, spare=6)]
    rows, retired = [], {}
    for o in sorted(offers, key=lambda o: (o.accelerator or "", o.price_per_hour)):
        r = retirement(o.cloud, o.instance_type, o.accelerator)
        if r is not None:
            retired[r.short()] = r.source
        split = (f"{o.host_price_per_hour:.3f} + {o.gpu_price_per_hour:.3f}"
                 if o.host_price_per_hour is not None and o.gpu_price_per_hour is not None else "")
        rows.append((o.cloud, o.region, ("† " if r else "") + o.instance_type,
                     gpu_config(o), f"{o.gpu_memory_gb:g}", str(o.vcpus),
                     f"{o.memory_gb:g}", f"{o.price_per_hour:.4f}",
                     f"{o.spot_price_per_hour:.4f}" if o.spot_price_per_hour is not None else "-",
                     o.price_date, o.spot_price_date or "-", split))
    table, left_out = fit_table(f"catalog: {plural(len(offers), 'offer')}", cols, rows, width)
    footer = [f"† retired: {what}; listed for its history, never launched" for what in sorted(retired)]
    dates = sorted({o.price_date for o in offers if o.price_date})
    if dates:
        try:
            age = (time.time() - time.mktime(time.strptime(dates[0], "%Y-%m-%d"))) / 86400
            old = f", the oldest {age / 365:.1f} years old" if age >= 365 else f", the oldest {age:.0f} days old"
        except ValueError:
            old = ""
        span = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
        footer.append(f"prices dated {span}{old}; `dlrun catalog refresh` reads today's from the clouds")
    if left_out:
        footer.append(f"left out at this width: {', '.join(left_out)} (a wider terminal shows them)")
    return table, footer
