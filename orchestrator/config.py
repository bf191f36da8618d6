"""The user's dlrun settings: $DLRUN_HOME/config.yaml (optional; every key has a default).

    default_deadline: 72h     # applied when a job names no deadline (the plan says so)
    optimize: cost            # cost | time: what "best" means among the candidates that fit
"""
from __future__ import annotations

from dataclasses import dataclass

from orchestrator.paths import dlrun_home

DEFAULTS = {"default_deadline": "72h", "optimize": "cost"}
OBJECTIVES = ("cost", "time")


@dataclass(frozen=True)
class Settings:
    default_deadline: str
    default_deadline_seconds: float
    optimize: str
    source: str  # where the values came from, for the plan's note


def config_path():
    return dlrun_home() / "config.yaml"


def load_settings() -> Settings:
    import yaml

    from orchestrator.errors import UsageError
    from orchestrator.planning.spec import parse_duration

    path = config_path()
    data: dict = {}
    if path.exists():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"{path}: not valid YAML ({str(e).splitlines()[0]}); fix or remove the file") from None
        if not isinstance(data, dict):
            raise UsageError(f"{path}: expected 'key: value' lines (e.g. default_deadline: 72h)")
        unknown = sorted(set(data) - set(DEFAULTS))
        if unknown:
            raise UsageError(f"{path}: unknown setting {', '.join(unknown)}; known: {', '.join(DEFAULTS)}")
    values = {**DEFAULTS, **{k: v for k, v in data.items() if v is not None}}
    try:
        seconds = parse_duration(values["default_deadline"])
    except ValueError as e:
        raise UsageError(f"{path}: default_deadline: {e}") from None
    if values["optimize"] not in OBJECTIVES:
        raise UsageError(f"{path}: optimize: '{values['optimize']}' is not one of {', '.join(OBJECTIVES)}")
    source = str(path) if "default_deadline" in data else "dlrun's default"
    return Settings(str(values["default_deadline"]), seconds, values["optimize"], source)
