"""Flag types every command shares, so that the same mistake reads the same everywhere (click only: light)."""
from __future__ import annotations

import click

from infra import BACKEND_NAMES

# --backend: checked against the registry and config.yaml's clusters by planning/usable.check_backend, before
# anything is profiled (the same line in plan, submit and estimate)
BACKEND_METAVAR = "|".join(BACKEND_NAMES) + "|cluster:NAME"


class Usd(click.ParamType):
    """An amount of US dollars (--max-cost, --monthly-cap): a number above 0 ("$5" and "1,000" read too)."""

    name = "usd"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            amount = float(value)
        else:
            try:
                amount = float(str(value).strip().lstrip("$").replace(",", ""))
            except ValueError:
                self.fail(f"'{value}' is not an amount of US dollars (e.g. 5 or 0.50)", param, ctx)
        if not amount > 0 or amount == float("inf"):
            self.fail(f"'{value}' is not an amount of US dollars above 0", param, ctx)
        return amount


USD = Usd()
