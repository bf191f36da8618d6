"""Profiling a user's own model: imported from the job's workdir, in a child process.

The child (`python -m orchestrator.planning.isolated_profile WORKLOAD.json OUT.json`) runs in the
workdir with it first on sys.path, so `model: model:TinyMLP` finds the workdir's model.py as it will on
the cluster, and whatever the user's module imports or patches stays in the child. The profile is
cached by the workload and the workdir's content (changed code is profiled again).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from orchestrator.errors import SpecError
from orchestrator.paths import profiles_dir
from orchestrator.estimate.profile import WorkloadProfile, cached_profile, profile_now, workload_hash
from orchestrator.planning.workdir import workdir_digest

DLRUN_ROOT = Path(__file__).resolve().parents[2]  # where orchestrator/ and jobs/ are importable from
TIMEOUT_S = 600


def cache_path(workload, workdir: str) -> Path:
    return profiles_dir() / f"{workload_hash(workload)}-{workdir_digest(workdir)}.json"


def cached_in_workdir(workload, workdir: str | None) -> WorkloadProfile | None:
    return cached_profile(workload, path=cache_path(workload, workdir or os.getcwd()))


def child_env(workdir: str) -> dict[str, str]:
    """The workdir first, then dlrun itself (for `jobs.*`), then what the caller had."""
    parts = [workdir, str(DLRUN_ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in parts if p), PYTHONDONTWRITEBYTECODE="1")


def measure_in_workdir(workload, workdir: str | None, *, refresh: bool = False) -> WorkloadProfile:
    workdir = workdir or os.getcwd()
    path = cache_path(workload, workdir)
    cached = None if refresh else cached_profile(workload, path=path)
    if cached is not None:
        return cached
    with tempfile.TemporaryDirectory(prefix="dlrun-profile-") as tmp:
        src, out = Path(tmp) / "workload.json", Path(tmp) / "profile.json"
        src.write_text(workload.model_dump_json())
        try:
            proc = subprocess.run([sys.executable, "-m", __name__, str(src), str(out)], cwd=workdir,
                                  env=child_env(workdir), capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise SpecError(f"{_field(workload)}: profiling {workload.label} took over {TIMEOUT_S} s; "
                            "give a smaller model or a reference: instead") from None
        answer = json.loads(out.read_text()) if out.exists() else None
    if answer is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SpecError(f"{_field(workload)}: profiling {workload.label} crashed ({last}); check the model")
    if "error" in answer:
        raise SpecError(answer["error"])
    prof = WorkloadProfile.from_json(answer["profile"])
    tmp_path = path.with_suffix(".tmp")
    tmp_path.write_text(json.dumps(prof.to_json()))
    tmp_path.replace(path)
    return prof


def _field(workload) -> str:
    return "workload.hf" if workload.hf is not None else "workload.model"


def _child(src: str, out: str) -> None:
    from orchestrator.planning.spec import Workload

    sys.path.insert(0, os.getcwd())
    workload = Workload.model_validate_json(Path(src).read_text())
    try:
        answer = {"profile": profile_now(workload).to_json()}
    except SpecError as e:
        answer = {"error": e.message}
    except Exception as e:  # the user's model code failed: say where, not a traceback
        answer = {"error": f"{_field(workload)}: {workload.label} failed while profiling "
                           f"({type(e).__name__}: {e}); check the model and workload."
                           f"{'seq_len' if workload.hf is not None else 'input_shape'}"}
    Path(out).write_text(json.dumps(answer))


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
