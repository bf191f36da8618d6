"""Which of a job's `requirements` the local Python lacks: a local job runs with dlrun's own interpreter, and
Ray's pip runtime env would clone that whole virtualenv (GBs: 2.2 GB in 56 s on the 2-core build machine,
ray 2.60 _clonevirtualenv.py) before pip says "Requirement already satisfied". So the env is asked for only
when something is missing or cannot be checked here (a URL, a file, an option line)."""
from __future__ import annotations

from importlib import metadata

# Ray's pip env for a local job: the clone of dlrun's virtualenv (2.2 GB in 56 s on the 2-core build machine, ray
# 2.60) and pip's check; paid on the job's first run on a head, which keeps the env while it lives
PIP_ENV_PRIOR_SECONDS = 60.0


def _satisfied(line: str, seen: frozenset[str] = frozenset()) -> bool:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(line)
    except InvalidRequirement:
        return False  # "-r file", "--index-url ...", a path: pip's, not checkable here
    if req.marker is not None and not req.marker.evaluate():
        return True  # not for this Python or platform
    if req.url:
        return False
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return False
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        return False
    name = req.name.lower()
    for extra in req.extras:  # "ray[default]": the packages that extra brings, one level down
        for dep in metadata.requires(req.name) or []:
            dep_req = Requirement(dep)
            if dep_req.marker is None or not dep_req.marker.evaluate({"extra": extra}):
                continue
            if dep_req.marker.evaluate({"extra": ""}):
                continue  # a base dependency, installed with the package
            bare = str(Requirement(dep.split(";")[0]))
            if name not in seen and not _satisfied(bare, seen | {name}):
                return False
    return True


def unmet_requirements(requirements: list[str]) -> list[str]:
    """The lines of `requirements` this Python's environment does not satisfy."""
    return [line for line in requirements if not _satisfied(line)]



def pip_env_note(unmet: list[str]) -> str:
    return (f"requirements not installed in dlrun's Python here: {', '.join(unmet)}: a local run first makes Ray's "
            f"pip env for them (a clone of dlrun's virtualenv, ~{PIP_ENV_PRIOR_SECONDS:.0f} s, in the estimate); "
            "pip install them into dlrun's environment to skip it")
