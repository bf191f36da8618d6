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


def override_options(command):
    """--gpus, --cloud, --region, --spot/--on-demand, --env: the job file's resources and env for this run
    (planning/overrides.py); the command gets them as one `overrides` (an Overrides)."""
    import functools

    options = [
        click.option("--gpus", default=None, metavar="NAME:COUNT", help="the GPUs to run on, e.g. T4:1 "
                     "(overrides resources.accelerators)"),
        click.option("--cloud", "clouds", multiple=True, metavar="BACKEND",
                     help="plan on this backend, repeatable (overrides resources.clouds)"),
        click.option("--region", "regions", multiple=True, help="only this region, repeatable "
                     "(overrides resources.regions)"),
        click.option("--spot/--on-demand", "spot", default=None,
                     help="spot only, or on-demand only (overrides resources.spot)"),
        click.option("--env", "env", multiple=True, metavar="NAME=VALUE", help="an environment variable of "
                     "the job, repeatable (added to env:)"),
    ]

    @functools.wraps(command)
    def wrapper(*args, gpus, clouds, regions, spot, env, **kwargs):
        from orchestrator.planning.overrides import Overrides

        return command(*args, overrides=Overrides(gpus, tuple(clouds), tuple(regions), spot, tuple(env)), **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
