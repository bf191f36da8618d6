"""Flags that override the job file's resources and environment for one plan or submit, as SkyPilot's `--gpus
T4:1 --cloud gcp --region … --use-spot --env K=V` do: `--gpus`, `--cloud` and `--region` (repeatable),
`--spot/--on-demand`, `--env NAME=VALUE` (repeatable). They go through the job file's own rules (the
Resources model's validators: a GPU dlrun does not know, a backend name, a count), so a mistake reads as it
would in the file, naming the flag instead of a line (exit 2). An --env changes the run (its run key), as
the same change in the file would.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from orchestrator.errors import SpecError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAGS = {"accelerators": "--gpus", "clouds": "--cloud", "regions": "--region", "spot": "--spot/--on-demand"}


@dataclass(frozen=True)
class Overrides:
    gpus: str | None = None
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    spot: bool | None = None                       # True: spot only, False: on-demand only, None: the file's
    env: tuple[str, ...] = field(default=())       # NAME=VALUE

    def __bool__(self) -> bool:
        return bool(self.gpus or self.clouds or self.regions or self.spot is not None or self.env)

    def to_json(self) -> str:
        """What a schedule stores (state/schedules.py); from_json reads it back."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> "Overrides":
        if not text:
            return cls()
        data = json.loads(text)
        return cls(data.get("gpus"), tuple(data.get("clouds") or ()), tuple(data.get("regions") or ()),
                   data.get("spot"), tuple(data.get("env") or ()))

    def as_flags(self) -> str:
        """The flags as typed: --gpus T4:1 --cloud gcp --spot --env SEED=1."""
        words = [f"--gpus {self.gpus}"] if self.gpus else []
        words += [f"--cloud {c}" for c in self.clouds] + [f"--region {r}" for r in self.regions]
        words += [] if self.spot is None else ["--spot" if self.spot else "--on-demand"]
        words += [f"--env {e}" for e in self.env]
        return " ".join(words)


def with_overrides(spec, flags: Overrides):
    """The spec with the flags applied; SpecError naming the flag when the job file's rules refuse a value."""
    from pydantic import ValidationError

    from orchestrator.planning.spec import Resources

    changes: dict = {}
    if flags.gpus:
        changes["accelerators"] = flags.gpus.strip()
    if flags.clouds:
        changes["clouds"] = list(dict.fromkeys(flags.clouds))
    if flags.regions:
        changes["regions"] = list(dict.fromkeys(flags.regions))
    if flags.spot is not None:
        changes["spot"] = "always" if flags.spot else "never"
    if changes:
        try:
            resources = Resources.model_validate({**spec.resources.model_dump(exclude_unset=True), **changes})
        except ValidationError as e:
            err = e.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else ""
            raise SpecError(f"{FLAGS.get(name, name)}: {str(err['msg']).removeprefix('Value error, ')}") from None
        spec = spec.model_copy(update={"resources": resources})
    if flags.env:
        spec = spec.model_copy(update={"env": {**spec.env, **_env_pairs(flags.env)}})
    return spec


def _env_pairs(items: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not ENV_NAME.match(name):
            raise SpecError(f"--env: '{item}' is not NAME=VALUE (a name of letters, digits and '_'; e.g. "
                            "--env SEED=1)")
        pairs[name] = value
    return pairs
