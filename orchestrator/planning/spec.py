"""The job file: JobSpec (pydantic) and load_job(path), which turns every mistake into one SpecError line."""
from __future__ import annotations

from infra import BACKEND_NAMES

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from infra.catalog import canonical_gpu, gpu_names
from orchestrator.errors import SpecError
from orchestrator.estimate.workload import Workload

CLOUDS = BACKEND_NAMES
_CLUSTER = re.compile(r"^cluster:[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a team's Ray cluster named in config.yaml


def _backend_name(value: str) -> str:
    if value in BACKEND_NAMES or _CLUSTER.match(value):
        return value
    raise ValueError(f"Input should be {', '.join(repr(n) for n in BACKEND_NAMES)} or 'cluster:NAME'")


CloudName = Annotated[str, AfterValidator(_backend_name)]  # the registry's names, and cluster:NAME
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 3600, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | float | int) -> float:
    """'4h', '90m', '1.5d', 3600 (seconds) -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("must be positive")
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"'{value}' is not a duration; write e.g. 30m, 4h or 1d")
    seconds = float(m[1]) * _UNITS[m[2]]
    if seconds <= 0:
        raise ValueError("must be positive")
    return seconds


class _Strict(BaseModel):
    # defaults are written Field(default=...): a type checker reads only that keyword as a default (PEP 681),
    # and a model whose fields all have defaults can then be a default_factory
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class AcceleratorWish(_Strict):
    name: str
    count: int = Field(default=1, ge=1)


class Resources(_Strict):
    accelerators: str | dict[str, int] | None = Field(
        default=None, description="GPU wish: 'T4:1', {T4: 1}; omit for anything that fits")
    gpu_memory_gb: str | float | None = Field(default=None, description="minimum GPU memory per GPU, e.g. '16+' or 16")
    num_nodes: int = Field(default=1, ge=1, le=64)
    cpus: int | None = Field(default=None, ge=1, description="CPUs per node for a CPU-only run (local)")
    spot: Literal["auto", "always", "never"] = "auto"
    clouds: list[CloudName] = Field(default_factory=lambda: list(CLOUDS), min_length=1)
    regions: list[str] | None = None
    image: str | None = Field(default=None, description="override the machine image (AMI id / GCE image)")

    @field_validator("accelerators")
    @classmethod
    def _known_gpu(cls, v):
        if v is None:
            return v
        wishes = _parse_accelerators(v)
        for w in wishes:
            if canonical_gpu(w.name) is None:
                near = difflib.get_close_matches(w.name.upper(), [n.upper() for n in gpu_names()], n=1)
                hint = f"did you mean {near[0]}?" if near else "known: " + ", ".join(gpu_names())
                raise ValueError(f"unknown accelerator '{w.name}'; {hint}")
        return v

    @field_validator("gpu_memory_gb")
    @classmethod
    def _mem(cls, v):
        if v is None:
            return v
        n = float(str(v).rstrip("+ ").strip() or "nan") if not isinstance(v, (int, float)) else float(v)
        if not n > 0:
            raise ValueError("write a positive number of GB, e.g. 16+")
        return v

    @property
    def accelerator_wishes(self) -> list[AcceleratorWish]:
        return _parse_accelerators(self.accelerators) if self.accelerators else []

    @property
    def min_gpu_memory_gb(self) -> float | None:
        if self.gpu_memory_gb is None:
            return None
        return float(str(self.gpu_memory_gb).rstrip("+ "))


def _parse_accelerators(v: str | dict[str, int]) -> list[AcceleratorWish]:
    if isinstance(v, dict):
        items = list(v.items())
    else:
        items = []
        for part in str(v).split(","):
            name, _, count = part.strip().partition(":")
            if not name:
                raise ValueError("write the accelerator as NAME:COUNT, e.g. T4:1")
            if count and not count.strip().isdigit():
                raise ValueError(f"count in '{part.strip()}' must be a whole number, e.g. T4:1")
            items.append((name.strip(), int(count) if count else 1))
    out = []
    for name, count in items:
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"count of {name} must be a whole number >= 1")
        out.append(AcceleratorWish(name=name, count=count))
    return out


class Budget(_Strict):
    max_cost: float | None = Field(default=None, gt=0, description="USD for the whole job")
    deadline: str | float | None = Field(default=None, description="wall-clock limit, e.g. 4h, 90m")
    monthly_cap: float | None = Field(default=None, gt=0)
    optimize: Literal["cost", "time"] | None = Field(default=None, description="cheapest (cost) or fastest (time) "
                                                     "of what fits; default: config.yaml's optimize")

    @field_validator("deadline")
    @classmethod
    def _deadline(cls, v):
        if v is not None:
            parse_duration(v)
        return v

    @property
    def deadline_seconds(self) -> float | None:
        return parse_duration(self.deadline) if self.deadline is not None else None


class Reference(_Strict):
    accelerator: str
    hours: float = Field(..., gt=0)
    count: int = Field(default=1, ge=1)

    @field_validator("accelerator")
    @classmethod
    def _known(cls, v):
        if canonical_gpu(v) is None and v.lower() != "cpu":
            raise ValueError(f"unknown accelerator '{v}'; known: " + ", ".join(gpu_names()))
        return v


class JobSpec(_Strict):
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    job: str | None = Field(default=None, description="a built-in job from jobs/ (cnn, lstm, resnet)")
    run: str | None = Field(default=None, description="any command, run in workdir on the cluster")
    workdir: str | None = Field(default=None, description="directory shipped to the cluster (with run)")
    args: list[str] = Field(default_factory=list, description="extra arguments for a built-in job")
    requirements: list[str] = Field(default_factory=list, description="pip packages the job needs")
    resources: Resources = Field(default_factory=Resources)
    budget: Budget = Field(default_factory=Budget)
    workload: Workload | None = None
    reference: Reference | None = None
    checkpoint: str | None = Field(default=None, description="a directory, s3://bucket/prefix or gs://bucket/prefix")
    env: dict[str, str] = Field(default_factory=dict)
    data: list[str] = Field(default_factory=list, description="inputs on every node as DLRUN_DATA_DIR: "
                            "s3://bucket/prefix, gs://bucket/prefix or a local directory")
    max_restarts_on_errors: int = Field(0, ge=0)
    max_preemptions: int = Field(3, ge=0)
    image: str | None = Field(default=None, description="the container image the job runs in: registry/name:tag "
                              "or name@sha256:digest (docker.io by default, as docker reads it)")
    image_pull: Literal["always", "if-missing"] | None = Field(default=None,
                                                               description="always | if-missing (default)")

    @field_validator("job")
    @classmethod
    def _builtin(cls, v):
        from jobs import BUILTIN_JOBS

        if v is not None and v not in BUILTIN_JOBS:
            near = difflib.get_close_matches(v, list(BUILTIN_JOBS), n=1)
            hint = f"did you mean {near[0]}?" if near else "built-in jobs: " + ", ".join(BUILTIN_JOBS)
            raise ValueError(f"no built-in job '{v}'; {hint}")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v):
        from infra.images.reference import parse_reference  # ValueError: one line at the job file's line

        return v if v is None or parse_reference(v) else v

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, v):
        if isinstance(v, dict):
            return {str(k): ("" if x is None else str(x)) if isinstance(x, (str, int, float, bool)) or x is None
                    else x for k, x in v.items()}
        return v

    @model_validator(mode="after")
    def _one_entrypoint(self):
        if (self.job is None) == (self.run is None):
            raise ValueError("give either 'job:' (a built-in job) or 'run:' (a command), not both or neither")
        if self.workdir and not self.run:
            raise ValueError("'workdir' goes with 'run:'")
        if self.image_pull and not self.image:
            raise ValueError("'image_pull' goes with 'image:' (the container image to pull)")
        if self.image and self.requirements:
            raise ValueError("'requirements' are not installed into an 'image:'; build them into the image")
        return self

    def spec_hash(self) -> str:
        data = self.model_dump(mode="json")
        if data.get("workload"):  # fields added later and unset: a job submitted before them keeps its hash
            for key in ("hf", "seq_len", "tf32", "memory_format", "optimizer_impl"):
                if data["workload"].get(key) is None:
                    data["workload"].pop(key, None)
        for key in ("image", "image_pull"):  # and the top-level ones
            if data.get(key) is None:
                data.pop(key, None)
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# --- loading -------------------------------------------------------------------------------------

def _key_lines(node, prefix=()) -> dict[tuple, int]:
    """Map each key path in a composed YAML node to its 1-based line."""
    out: dict[tuple, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = prefix + (k.value,)
            out[path] = k.start_mark.line + 1
            out.update(_key_lines(v, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[prefix + (i,)] = v.start_mark.line + 1
            out.update(_key_lines(v, prefix + (i,)))
    return out


def _model_for(loc: tuple) -> type[BaseModel] | None:
    model: Any = JobSpec
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
        f = model.model_fields.get(part)
        if f is None:
            return None
        ann = f.annotation
        args = getattr(ann, "__args__", ())
        model = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    return model


def _clean_loc(err: ErrorDetails) -> tuple:
    """The field path of an error, without the tags pydantic adds for union branches (type and model
    names); the unknown key of an 'extra' error is the user's own and always kept."""
    raw = tuple(err["loc"])
    own = raw[-1:] if err["type"] == "extra_forbidden" else ()
    body = raw[:len(raw) - len(own)]
    loc = tuple(p for p in body if not (isinstance(p, str) and (p[:1].isupper() or "[" in p)))
    return tuple(p for p in loc if p not in ("str", "float", "int", "dict[str,int]", "function-after")) + own


def _typos_first(errs: list[ErrorDetails]) -> list[ErrorDetails]:
    """A misspelt required field reads as 'unknown field' plus 'required field missing': say the
    first, with its 'did you mean', and drop the second (it is the same mistake)."""
    extra = [e for e in errs if e["type"] == "extra_forbidden"]
    explained = set()
    for e in extra:
        loc = _clean_loc(e)
        parent = _model_for(loc[:-1])
        names = list(parent.model_fields) if parent else []
        for near in difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.5):
            explained.add(loc[:-1] + (near,))
    rest = [e for e in errs if e["type"] != "extra_forbidden"
            and not (e["type"] == "missing" and _clean_loc(e) in explained)]
    return extra + rest if explained else errs


def _describe(err: ErrorDetails, lines: dict[tuple, int], where: str) -> str:
    loc = _clean_loc(err)  # pydantic tags union branches with type names (str, dict[str,int]): dropped
    # a key is the user's text: escaped, so that a newline in it cannot split the one-line message
    field = ".".join(str(p).encode("unicode_escape").decode() for p in loc) or "(top level)"
    line = next((lines[loc[:i]] for i in range(len(loc), 0, -1) if loc[:i] in lines), None)
    at = f"{where}:{line}" if line else where
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        parent = _model_for(loc[:-1])
        names = list(parent.model_fields) if parent else []
        near = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.5)
        fix = f"did you mean '{near[0]}'?" if near else f"allowed here: {', '.join(names)}"
        return f"{at}: unknown field '{field}'; {fix}"
    if kind == "missing":
        return f"{at}: field '{field}' is required; add it"
    msg = msg.removeprefix("Value error, ")
    return f"{at}: field '{field}': {msg}"


def parse_job(text: str, where: str = "<job>") -> JobSpec:
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{where}{line}: YAML syntax error: {problem}; fix the indentation or quoting") from None
    except Exception as e:  # e.g. recursion limits on pathological input
        raise SpecError(f"{where}: cannot read YAML: {type(e).__name__}; check the file") from None
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a job file is a mapping of fields (name:, job: or run:, ...); "
                        f"got {type(data).__name__}")
    if any(not isinstance(k, str) for k in data):
        raise SpecError(f"{where}: every top-level key must be a name; check for stray lines")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as e:
        errs = _typos_first(e.errors(include_url=False))
        lines = _key_lines(node) if node is not None else {}
        first = _describe(errs[0], lines, where)
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        raise SpecError(first + more) from None
    except (ValueError, TypeError, RecursionError) as e:
        raise SpecError(f"{where}: {e}; fix the job file") from None


def shipped_example(p: Path) -> Path | None:
    """configs/examples/NAME.yaml (or NAME.yaml) from the installed package, when not in the cwd."""
    from configs import EXAMPLES_DIR

    if p.is_absolute() or (len(p.parts) > 1 and p.parts[:-1] != ("configs", "examples")):
        return None
    shipped = EXAMPLES_DIR / p.name
    return shipped if shipped.is_file() else None


def load_job(path: str | Path, *, max_cost: float | None = None, deadline: str | None = None) -> JobSpec:
    """Read and validate a job file; CLI overrides (--max-cost, --deadline) win over the file."""
    p = Path(path)
    if not p.exists():
        p = shipped_example(p) or p
    if not p.exists():
        from configs import EXAMPLES_DIR

        names = ", ".join(sorted(e.name for e in EXAMPLES_DIR.glob("*.yaml")))
        raise SpecError(f"{path}: no such job file; check the path (shipped examples: {names})")
    if p.is_dir():
        raise SpecError(f"{p}: is a directory; give the job's YAML file")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{p}: cannot read the job file ({e.__class__.__name__}); check it is UTF-8 text") from None
    spec = parse_job(text, str(p))
    return apply_overrides(spec, str(p), max_cost=max_cost, deadline=deadline)


def apply_overrides(spec: JobSpec, where: str, *, max_cost=None, deadline=None) -> JobSpec:
    if max_cost is not None and not max_cost > 0:
        raise SpecError(f"--max-cost: must be a positive number of USD (got {max_cost})")
    if deadline is not None:
        try:
            parse_duration(deadline)
        except ValueError as e:
            raise SpecError(f"--deadline: {e}") from None
    budget = spec.budget.model_copy(update={k: v for k, v in
                                            {"max_cost": max_cost, "deadline": deadline}.items() if v is not None})
    spec = spec.model_copy(update={"budget": budget})
    if spec.workdir and not Path(spec.workdir).is_absolute():
        spec = spec.model_copy(update={"workdir": str((Path(where).parent / spec.workdir).resolve())})
    if spec.workdir:
        from orchestrator.planning.workdir import check_workdir

        check_workdir(spec.workdir, where)
    if spec.workload is not None and isinstance(spec.workload.hf, str):  # read now: the cluster has no such file
        from orchestrator.estimate.hf_workload import resolve_config

        config = resolve_config(spec.workload.hf, Path(where).parent, where)
        spec = spec.model_copy(update={"workload": spec.workload.model_copy(update={"hf": config})})
    if spec.data:
        from orchestrator.planning.data_inputs import check_data

        spec = spec.model_copy(update={"data": check_data(spec.data, where)})
    return spec


def json_schema() -> dict:
    schema = JobSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "dlrun job file"
    return schema
