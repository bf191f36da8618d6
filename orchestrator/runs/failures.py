"""What went wrong where, said once: the preflight of each cloud a plan uses, and the failures of
the offers tried, grouped by reason for the final message."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from infra.base import Provider, ProviderError

MAX_LINES = 10


@dataclass
class Failures:
    """Offers that failed to provision, by reason (insertion order kept)."""

    by_reason: dict[str, list[str]] = field(default_factory=dict)
    only_credentials: bool = True

    def add(self, what: str, error: ProviderError) -> None:
        from infra.base import CredentialsError

        self.by_reason.setdefault(error.message, []).append(what)
        self.only_credentials &= error.scope == "cloud" and isinstance(error, CredentialsError)

    def __bool__(self) -> bool:
        return bool(self.by_reason)

    def summary(self, headline: str, limit: int = MAX_LINES) -> str:
        """One line when there was one reason; else a headline and a line per reason (at most `limit`)."""
        if len(self.by_reason) == 1:
            (reason, offers), = self.by_reason.items()
            return f"{_names(offers)}: {reason}"
        lines = [headline + ":"]
        for reason, offers in list(self.by_reason.items())[:limit]:
            lines.append(f"  {_names(offers)}: {reason}")
        if len(self.by_reason) > limit:
            lines.append(f"  … and {len(self.by_reason) - limit} more reasons (`dlrun status JOB` lists them)")
        return "\n".join(lines)


def _names(offers: list[str]) -> str:
    return ", ".join(offers[:3]) + (f" and {len(offers) - 3} more" if len(offers) > 3 else "")


def preflight(cloud: str, get_provider: Callable[[str], Provider]) -> ProviderError | None:
    """The error that makes every offer of this cloud fail (credentials, the SSH address), or None.

    Asked once per cloud before anything is provisioned there: a missing login costs no launch and is
    said once, not once per offer.
    """
    from infra.base import ProviderError

    try:
        get_provider(cloud).preflight()
    except ProviderError as e:
        return e
    return None
