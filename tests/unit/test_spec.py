"""The job file: good files load, every user mistake is one SpecError line (exit 2), never a traceback."""
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import SpecError
from orchestrator.planning.spec import load_job, parse_job, parse_duration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs/examples/digits_cnn.yaml"


def test_examples_load():
    examples = sorted((ROOT / "configs/examples").glob("**/*.yaml"))
    assert len(examples) >= 5 and EXAMPLE in examples, examples  # the glob finds the examples (a moved folder fails)
    for p in examples:
        spec = load_job(p)
        assert spec.name and (spec.job or spec.run), p


def test_cli_override_wins():
    spec = load_job(EXAMPLE, max_cost=1.5, deadline="30m")
    assert spec.budget.max_cost == 1.5
    assert spec.budget.deadline_seconds == 1800


def test_accelerator_forms():
    s = parse_job("name: a\njob: cnn\nresources: {accelerators: 'T4:2', gpu_memory_gb: 16+}")
    assert [(w.name, w.count) for w in s.resources.accelerator_wishes] == [("T4", 2)]
    assert s.resources.min_gpu_memory_gb == 16
    s = parse_job("name: a\njob: cnn\nresources: {accelerators: {V100: 1}}")
    assert s.resources.accelerator_wishes[0].name == "V100"


@pytest.mark.parametrize("text, expect", [
    ("name: x\njob: cnn\nresorces: {}", ["f.yaml:3", "resorces", "did you mean 'resources'"]),
    ("name: x\njob: cnn\nresources:\n  acelerators: T4", ["f.yaml:4", "did you mean 'accelerators'"]),
    ("name: x\njob: cnn\nresources:\n  accelerators: T5:1", ["f.yaml:4", "unknown accelerator 'T5'"]),
    ("name: x\njob: cnn\nbudget: {max_cost: -1}", ["budget.max_cost", "greater than 0"]),
    ("name: x\njob: cnn\nbudget: {max_cost: lots}", ["budget.max_cost", "valid number"]),
    ("name: x\njob: cnn\nbudget: {deadline: soon}", ["budget.deadline", "not a duration"]),
    ("name: x\njob: cnnn", ["did you mean cnn"]),
    ("name: x\njob: cnn\nrun: python a.py", ["either 'job:'"]),
    ("name: x\njob: cnn\nresources: {num_nodes: two}", ["resources.num_nodes", "integer"]),
    ("name: [x\njob: cnn", ["YAML syntax error"]),
    ("- a\n- b", ["mapping"]),
    ("job: cnn", ["'name' is required"]),
    ("name: x\njob: cnn\nresources: {spot: sometimes}", ["resources.spot", "'auto'"]),
])
def test_mistakes_are_one_clear_line(text, expect):
    with pytest.raises(SpecError) as e:
        parse_job(text, "f.yaml")
    msg = e.value.message
    assert "\n" not in msg
    for part in expect:
        assert part in msg, msg


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SpecError, match="no such job file"):
        load_job(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="is a directory"):
        load_job(tmp_path)


def test_durations():
    assert parse_duration("4h") == 14400
    assert parse_duration("90m") == 5400
    assert parse_duration("1.5d") == 129600
    with pytest.raises(ValueError):
        parse_duration("0h")


# --- fuzz: malformed job files always end in SpecError ---------------------------------------------
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                     st.text(max_size=12))
_keys = st.sampled_from(["name", "job", "run", "workdir", "resources", "budget", "workload", "env",
                         "accelerators", "num_nodes", "spot", "clouds", "max_cost", "deadline", "model",
                         "input_shape", "batch_size", "epochs", "precision", "checkpoint", "reference",
                         "hours", "accelerator", "bogus"]) | st.text(max_size=8)
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) |
                       st.dictionaries(_keys, inner, max_size=5), max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=8))
def test_fuzz_structured(doc):
    try:
        text = yaml.safe_dump(doc)
    except Exception:
        return
    try:
        parse_job(text, "fuzz.yaml")
    except SpecError as e:
        assert e.message and "\n" not in e.message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_raw_text(text):
    try:
        parse_job(text, "fuzz.yaml")
    except SpecError as e:
        assert e.message


def test_an_unknown_key_with_a_newline_is_still_one_line():
    with pytest.raises(SpecError) as e:
        parse_job(yaml.safe_dump({"name": "x", "job": "cnn", "\n": 1}), "f.yaml")
    assert "\n" not in e.value.message and "unknown field '\\n'" in e.value.message


def test_a_model_workload_keeps_the_spec_hash_it_had_before_later_workload_fields():
    # runs resume by spec hash: fields added later (hf:, seq_len, tf32, memory_format, optimizer_impl) must not
    # change it for jobs without them
    import hashlib

    spec = load_job(Path(__file__).resolve().parents[2] / "configs/examples/digits_cnn.yaml")
    data = spec.model_dump(mode="json")
    for key in ("hf", "seq_len", "tf32", "memory_format", "optimizer_impl"):
        del data["workload"][key]
    for key in ("image", "image_pull"):  # top-level fields added later (issue 36)
        del data[key]
    before = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert spec.spec_hash() == before
