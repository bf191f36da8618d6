"""Cron and time-zone arithmetic for schedules: validation and the next firing instant, DST safe.

croniter is only ever fed naive wall-clock times of the schedule's zone, so its own DST handling
never comes into play; this module maps each wall time to a UTC instant:
- a wall time that does not exist (spring forward, e.g. 02:30 when 02:00 jumps to 03:00) fires once,
  at the instant of the jump, as Vixie cron does;
- a wall time that occurs twice (fall back) fires once, at its first occurrence.
Cron numbers the days of the week 0-7 with 0 and 7 both Sunday (croniter follows cron).
Six fields put the seconds first (`*/30 * * * * *`: every 30 s), as Quartz/Spring write it and croniter
reads it with second_at_beginning.
"""
from __future__ import annotations

import os
from datetime import datetime, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from orchestrator.errors import UsageError
from orchestrator.settings import env_str

CRON_FIELDS = "minute hour day-of-month month day-of-week"
SECONDS_FIRST = "second minute hour day-of-month month day-of-week"


def _with_seconds(expr: str) -> bool:
    return not expr.startswith("@") and len(expr.split()) == 6


def validate_cron(expr: str) -> str:
    from croniter import croniter

    expr = " ".join(str(expr).split())
    fields = expr.split(" ")
    if not expr.startswith("@") and len(fields) not in (5, 6):
        raise UsageError(f"--cron '{expr}': needs 5 fields ({CRON_FIELDS}), e.g. '0 2 * * *', "
                         f"or 6 with the seconds first ({SECONDS_FIRST})")
    try:
        ok = croniter.is_valid(expr, second_at_beginning=_with_seconds(expr))
    except Exception:
        ok = False
    if not ok:
        raise UsageError(f"--cron '{expr}': not a valid cron expression ({CRON_FIELDS}; "
                         f"day-of-week 0 or 7 = Sunday), e.g. '0 2 * * *'")
    return expr


def zone(tz: str) -> ZoneInfo:
    try:
        if not tz or tz != tz.strip():
            raise ValueError
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise UsageError(f"--tz '{tz}': unknown time zone; use an IANA name such as Europe/Madrid, "
                         f"America/New_York or UTC") from None


def local_tz_name() -> str:
    """The machine's IANA zone name (TZ, then /etc/localtime), or UTC when it cannot be told."""
    candidates = [env_str("TZ").lstrip(":")]
    try:
        target = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in target:
            candidates.append(target.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    for name in candidates:
        try:
            if name:
                ZoneInfo(name)
                return name
        except (ZoneInfoNotFoundError, ValueError, OSError):
            continue
    return "UTC"


def _instant(wall: datetime, tz: ZoneInfo) -> float:
    """The UTC epoch at which wall-clock time `wall` (naive, in tz) should fire."""
    first = wall.replace(tzinfo=tz, fold=0)
    ts = first.timestamp()
    back = datetime.fromtimestamp(ts, tz).replace(tzinfo=None)
    if back == wall:
        return ts  # exists (if it exists twice, fold=0 is the first occurrence)
    # a gap: fold=0 maps past the jump, fold=1 before it; the jump lies between, find it
    lo, hi = int(wall.replace(tzinfo=tz, fold=1).timestamp()), int(ts)
    after = datetime.fromtimestamp(hi, tz).utcoffset()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return float(hi)


def next_fire_after(expr: str, tz_name: str, after: float) -> float:
    """The first firing instant (UTC epoch seconds) strictly after `after`."""
    from croniter import croniter

    tz = zone(tz_name)
    start = datetime.fromtimestamp(after, tz).replace(tzinfo=None, microsecond=0)
    it = croniter(expr, start, second_at_beginning=_with_seconds(expr))
    for _ in range(100_000):
        wall = it.get_next(datetime)
        ts = _instant(wall, tz)
        if ts > after:
            return ts
    raise UsageError(f"cron '{expr}' never fires; check the day and month fields")


def month_start(now: float, tz_name: str) -> float:
    """The UTC epoch of 00:00 on the first of the current month in the zone."""
    local = datetime.fromtimestamp(now, zone(tz_name))
    first = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    return _instant(first, zone(tz_name))


def fmt_local(ts: float | None, tz_name: str) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, zone(tz_name)).strftime("%Y-%m-%d %H:%M:%S %Z")


def iso_local(ts: float | None, tz_name: str) -> str | None:
    """ISO 8601 with the zone's UTC offset at that instant (2026-11-24T02:00:00+01:00); None for None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, zone(tz_name)).replace(microsecond=0).isoformat()


def utc_iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
