"""Before profiling: the job file's `workload:` names a model that imports, builds and takes the input it
describes. A mistake there is one line with the field and its file:line (exit 2), never an internal error
after seconds of profiling.

The input is tried with one sample on the meta device (shapes only: nothing computed, no memory); a model
that fails there is tried again on the CPU with one real sample, so that a model meta tensors cannot run
(a `.item()`, data loaded in its constructor) is never refused for it. A user's own model (`run:` with a
workdir) is profiled in a process of its own and checked there; a Hugging Face config is dlrun's own build.
"""
from __future__ import annotations

from pathlib import Path

from orchestrator.errors import SpecError


def field_at(path: str, *field: str) -> str:
    """`path:line` of a field of the job file (the nearest enclosing key that has a line), else `path`."""
    import yaml

    from orchestrator.planning.spec import _key_lines

    try:
        lines = _key_lines(yaml.compose(Path(path).read_text()))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return path
    line = next((lines[field[:i]] for i in range(len(field), 0, -1) if field[:i] in lines), None)
    return f"{path}:{line}" if line else path


def check_workload(spec, path: str) -> None:
    """SpecError (exit 2) naming workload.model or workload.input_shape, with its file:line, when the model
    cannot be imported or built, or does not take one sample of workload.input_shape."""
    w = spec.workload
    if w is None or spec.run or w.hf is not None:
        return
    from orchestrator.estimate.profile import build_model, cached_profile

    if cached_profile(w, measure_local=False) is not None:  # profiled before: it took this very input
        return
    try:
        build_model(w, "meta")
    except SpecError as e:  # import or model_kwargs: the field is in the message; where it is, here
        field = "model_kwargs" if e.message.startswith("workload.model_kwargs") else "model"
        raise SpecError(f"{field_at(path, 'workload', field)}: {e.message}") from None
    except Exception:  # noqa: BLE001 — a factory that cannot build on meta: the profiler builds it on the CPU
        pass
    error = _forward_error(w, "meta") and _forward_error(w, "cpu")
    if error:
        shape = list(w.sample_shape)
        raise SpecError(f"{field_at(path, 'workload', 'input_shape')}: workload.input_shape: {w.model} does not "
                        f"take a sample of shape {shape} ({error}); give the shape of one sample, without the "
                        "batch dimension (e.g. [channels, height, width] for an image)")


def _forward_error(workload, device: str) -> str:
    """The first line of what one forward pass of one sample raised on `device` ("" when it ran)."""
    import torch

    from orchestrator.estimate.profile import build_model, make_batch

    try:
        model = build_model(workload, device)
        x, _ = make_batch(workload, device, batch_size=1)
        with torch.no_grad():
            model.eval()
            model(x)
    except SpecError:
        raise
    except Exception as e:  # noqa: BLE001 — what the model raised is the user's answer, in one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"{type(e).__name__}: {first[:200]}"
    return ""
