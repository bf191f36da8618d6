"""`dlrun estimate`: the job's step, throughput and run time on GPUs of the table, with basis and range."""
from __future__ import annotations

import json

import shutil
import textwrap

import click

from orchestrator.cli.params import override_options
from orchestrator.errors import UsageError


def parse_gpu(text: str) -> tuple[str, int]:
    """NAME[:COUNT] -> (the table's name, count); one clear line for a GPU or count it cannot read."""
    from infra.catalog import canonical_gpu, gpu_names

    name, _, count = text.partition(":")
    gpu = canonical_gpu(name.strip())
    if gpu is None:
        import difflib

        names = gpu_names()
        close = difflib.get_close_matches(name.strip().upper(), [n.upper() for n in names], n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(n for n in names if n.upper() in close)}?" if close else ""
        raise UsageError(f"--gpu {text}: unknown GPU '{name}'{hint} (configs/catalog/gpus.csv knows: "
                         f"{', '.join(names)})")
    if count and not (count.isdigit() and int(count) >= 1):
        raise UsageError(f"--gpu {text}: COUNT must be a whole number of GPUs, 1 or more (e.g. {gpu}:8)")
    return gpu, int(count or 1)


def default_gpus(spec) -> list[tuple[str, int, bool]]:
    """(gpu, count, on this machine) of the offers the job's backends have, in the GPU table's order."""
    from infra import offers_for, runs_here
    from infra.catalog import canonical_gpu, gpu_names
    from orchestrator.planning.planner import exclusion_reason

    found: dict[tuple[str, int], bool] = {}
    for o in offers_for(spec.resources.clouds):
        if o.accelerator and exclusion_reason(spec, o, frozenset()) is None:
            key = (canonical_gpu(o.accelerator) or o.accelerator, max(1, o.accelerator_count))
            found[key] = found.get(key, False) or runs_here(o.cloud)
    order = {n: i for i, n in enumerate(gpu_names())}
    return [(g, c, here) for (g, c), here in sorted(found.items(), key=lambda kv: (order.get(kv[0][0], 999),
                                                                                   kv[0][1]))]


def _local_gpu() -> str | None:
    from infra.local.gpus import local_gpu_name

    return local_gpu_name()


def estimates(spec, gpus: tuple[str, ...]) -> list:
    from orchestrator.estimate.estimator import estimate_on_gpu, history_from_store
    from orchestrator.planning.planner import profile_for
    from orchestrator.state.db import Store

    wanted = [(*parse_gpu(g), False) for g in gpus] if gpus else default_gpus(spec)
    if not wanted:
        raise UsageError("no GPU to estimate: the job's backends offer none; name some with --gpu (e.g. "
                         "--gpu H100 --gpu T4:4)")
    local = _local_gpu()
    profile = profile_for(spec)
    history = history_from_store(Store())
    return [estimate_on_gpu(profile, gpu, count, here=here or (count == 1 and gpu == local), history=history)
            for gpu, count, here in wanted]


def _table(rows) -> None:
    from rich.console import Console
    from rich.table import Table

    from orchestrator.cli.render.plan_table import human_duration

    table = Table(title="Predicted per GPU (the range: 90 %)", title_justify="left")
    for col in ("GPU", "step", "range", "samples/s", "run", "basis"):
        table.add_column(col, justify="right" if col in ("step", "range", "samples/s", "run") else "left")
    for e in rows:
        gpu = f"{e.count}×{e.gpu}" if e.count > 1 else e.gpu
        run = human_duration(e.run_seconds)
        if e.start_seconds:
            run += f" ({human_duration(e.start_seconds)} start)"
        table.add_row(gpu, _ms(e.step_seconds), f"{_ms(e.low)}–{_ms(e.high)}", f"{e.samples_per_second:,.0f}",
                      run, e.basis)
    console = Console()
    (console if console.is_terminal else Console(width=160)).print(table)
    notes = sorted({e.detail for e in rows if e.detail})
    if any(e.start_seconds for e in rows):
        notes.append("run: the job's steps and evaluation, and its process's start (imports, CUDA, data load); "
                     "a cluster's start-up is apart (dlrun plan)")
    if any(e.count > 1 for e in rows):
        notes.append("N×GPU: workload.batch_size is the whole step's batch, split across the N GPUs (data parallel: "
                     "each steps the whole optimizer, then the gradients are all-reduced); samples/s counts the "
                     "whole batch")
    width = shutil.get_terminal_size((80, 24)).columns
    for note in notes:
        click.echo(textwrap.fill(note, width=max(40, width), initial_indent="  ", subsequent_indent="    "))


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms" if seconds < 10 else f"{seconds:,.1f} s"


@click.command("estimate")
@click.argument("job_file", type=click.Path(dir_okay=True))
@click.option("--gpu", "table_gpus", multiple=True, metavar="NAME[:COUNT]",
              help="a GPU of the table, repeatable (default: the GPUs the job's offers have)")
@click.option("--json", "as_json", is_flag=True, help="print a list of estimates as JSON")
@override_options
def estimate_command(job_file, table_gpus, as_json, overrides):
    """Predict the job's step time, samples/s and run time on GPUs, with the basis and range of each."""
    from orchestrator.cli.plan import warm_profile
    from orchestrator.planning.overrides import with_overrides
    from orchestrator.planning.spec import load_job

    for g in table_gpus:  # a typo fails before the model is profiled
        parse_gpu(g)
    spec = with_overrides(load_job(job_file), overrides)  # --gpus etc.: the offers whose GPUs are the default rows
    warm_profile(spec)
    rows = estimates(spec, table_gpus)
    if as_json:
        click.echo(json.dumps([e.to_json() for e in rows], indent=2))
    else:
        _table(rows)
