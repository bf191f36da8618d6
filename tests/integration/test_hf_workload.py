"""`workload: {hf: ...}`: a Hugging Face model named by its config (a file, a directory, the local HF cache
or inline) is profiled from the architecture with the real transformers package, tiny configs only, and
nothing is downloaded: HF_HUB_OFFLINE=1, and every non-loopback connection, in this process and in the
profiling child, is refused and recorded (the test fails on any)."""
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.cli import plan as cli_plan
from orchestrator.errors import SpecError
from orchestrator.planning.isolated_profile import cached_in_workdir
from orchestrator.planning.spec import load_job, parse_job
from orchestrator.estimate.workload import Workload

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "configs/examples/hf_text.yaml"
BERT = {"model_type": "bert", "vocab_size": 500, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 128, "max_position_embeddings": 64}
GPT2 = {"model_type": "gpt2", "vocab_size": 500, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_positions": 64}

# a socket guard, run in this process and (as sitecustomize) in every Python child started with the
# test's PYTHONPATH: loopback and Unix sockets pass, anything else is refused and written to a log
GUARD_FUNCTION = """
import os, socket

def _guarded(connect):
    def attempt(self, address, *rest):
        host = address[0] if isinstance(address, tuple) else None
        if host is not None and self.family in (socket.AF_INET, socket.AF_INET6) \\
                and host not in ("127.0.0.1", "::1", "localhost"):
            with open(os.environ["DLRUN_TEST_NET_LOG"], "a") as log:
                log.write(f"{os.getpid()} {address}\\n")
            raise OSError(101, "network is unreachable (no downloads in this test)")
        return connect(self, address, *rest)
    return attempt
"""
GUARD = GUARD_FUNCTION + """
if not getattr(socket.socket, "_dlrun_guarded", False):
    socket.socket.connect = _guarded(socket.socket.connect)
    socket.socket.connect_ex = _guarded(socket.socket.connect_ex)
    socket.socket._dlrun_guarded = True
"""


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    guard_dir, log = tmp_path / "net-guard", tmp_path / "net.log"
    guard_dir.mkdir()
    (guard_dir / "sitecustomize.py").write_text(GUARD)
    monkeypatch.setenv("DLRUN_TEST_NET_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(guard_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))  # empty unless a test fills it
    monkeypatch.setenv("DLRUN_LOCAL_GPUS", "none")
    guard: dict = {}
    exec(GUARD_FUNCTION, guard)  # noqa: S102  (the guard above, in this process too, for this test only)
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, guard["_guarded"](getattr(socket.socket, name)))
    yield
    assert not log.exists(), f"something tried to reach the network: {log.read_text()}"


def job(tmp_path, workload, **fields) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "run": "python train.py", "workload": workload, **fields}))
    return path


def tiny(hf=None, **kw):
    return Workload(**{"hf": hf or BERT, "seq_len": 32, "batch_size": 4, "dataset_size": 64, "epochs": 1, **kw})


# --- the job file ---------------------------------------------------------------------------------

def test_an_inline_config_is_a_workload_of_token_ids():
    spec = parse_job("name: a\nrun: python t.py\nworkload: {hf: {model_type: bert, hidden_size: 64}, seq_len: 128,"
                     " batch_size: 8, dataset_size: 80, epochs: 2}")
    w = spec.workload
    assert w.hf == {"model_type": "bert", "hidden_size": 64} and w.model is None
    assert w.sample_shape == [128] and w.steps_per_epoch == 10 and w.label == "hf:bert"


@pytest.mark.parametrize("workload, expect", [
    ("{model: jobs.cnn:SimpleCNN, hf: {model_type: bert}, seq_len: 8, input_shape: [1]}", "not both or neither"),
    ("{seq_len: 8}", "give either 'model:'"),
    ("{hf: {model_type: bert}}", "'hf:' needs seq_len"),
    ("{hf: {hidden_size: 64}, seq_len: 8}", "add model_type"),
    ("{hf: {model_type: bert}, seq_len: 8, input_shape: [8]}", "input_shape and model_kwargs go with 'model:'"),
    ("{hf: {model_type: bert}, seq_len: 0}", "greater than or equal to 1"),
    ("{model: jobs.cnn:SimpleCNN}", "'model:' needs input_shape"),
])
def test_a_wrong_hf_workload_is_one_line_naming_the_field(workload, expect):
    text = f"name: a\nrun: python t.py\nworkload: {workload[:-1]}, batch_size: 8, dataset_size: 80, epochs: 1}}"
    with pytest.raises(SpecError) as e:
        parse_job(text, "f.yaml")
    assert e.value.message.startswith("f.yaml:3: field 'workload") and expect in e.value.message, e.value.message
    assert "\n" not in e.value.message


def test_a_config_file_or_directory_is_read_relative_to_the_job_file_and_kept_in_the_spec(tmp_path):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(BERT))
    for given in ("tiny/config.json", "tiny"):
        spec = load_job(job(tmp_path, {"hf": given, "seq_len": 32, "batch_size": 4, "dataset_size": 8, "epochs": 1}))
        assert spec.workload.hf == {**BERT, "_name_or_path": given}  # the cluster needs no file
        assert spec.workload.label in ("hf:bert from tiny/config.json", "hf:tiny")
        assert parse_job(yaml.safe_dump(spec.model_dump(mode="json")), "again").workload == spec.workload


def test_a_model_name_is_read_from_the_local_hugging_face_cache_only(tmp_path):
    # the cache's own layout (huggingface_hub's file_download): refs/main names the snapshot
    repo = tmp_path / "hf-cache" / "models--tiny-org--tiny-bert"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "config.json").write_text(json.dumps(GPT2))
    fields = {"seq_len": 32, "batch_size": 4, "dataset_size": 8, "epochs": 1}
    spec = load_job(job(tmp_path, {"hf": "tiny-org/tiny-bert", **fields}))
    assert spec.workload.hf == {**GPT2, "_name_or_path": "tiny-org/tiny-bert"}
    assert spec.workload.label == "hf:tiny-org/tiny-bert"
    with pytest.raises(SpecError) as e:
        load_job(job(tmp_path, {"hf": "bert-base-uncased", **fields}))
    assert e.value.message == (f"{tmp_path / 'job.yaml'}: workload.hf: 'bert-base-uncased' is neither a config file "
                               "nor in the local Hugging Face cache (dlrun downloads nothing); give the path of its "
                               "config.json or an inline config")


def test_an_unreadable_config_file_is_one_line(tmp_path):
    fields = {"seq_len": 32, "batch_size": 4, "dataset_size": 8, "epochs": 1}
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "untyped.json").write_text('{"hidden_size": 64}')
    cases = {"missing.json": "no config at", "bad.json": "cannot read", "untyped.json": "has no model_type"}
    for name, expect in cases.items():
        with pytest.raises(SpecError) as e:
            load_job(job(tmp_path, {"hf": name, **fields}))
        assert e.value.message.startswith(f"{tmp_path / 'job.yaml'}: workload.hf: ") and expect in e.value.message


# --- parameters and FLOPs from the architecture ----------------------------------------------------

def _real_step_flops(model_class, config, ids):
    """FLOPs of one real training step (forward + backward) of an instantiated model on the CPU."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = model_class.from_config(config)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    return model, counter.get_total_flops()


@pytest.mark.parametrize("hf, auto", [(BERT, "AutoModelForMaskedLM"), (GPT2, "AutoModelForCausalLM")])
def test_params_and_flops_from_the_meta_model_match_an_instantiated_one_and_the_formula(hf, auto):
    import torch
    import transformers
    from orchestrator.estimate.profile import profile_now

    w = tiny(hf)
    prof = profile_now(w, measure_local=False)
    config = transformers.AutoConfig.for_model(**hf)
    ids = torch.randint(0, hf["vocab_size"], (w.batch_size, w.seq_len))
    model, flops = _real_step_flops(getattr(transformers, auto), config, ids)

    assert prof.params == sum(p.numel() for p in model.parameters())
    # attention as CUDA's flash kernels run it: their backward recomputes QKᵀ (2.5 x forward where the CPU's
    # unfused backward does 2 x), and a causal mask skips half the tiles; everything else to the FLOP
    forward = sum(o.flops for o in prof.ops if o.name == "scaled_dot_product_attention")
    fused = sum(o.flops for o in prof.ops if o.kind == "attention")
    assert fused == pytest.approx(3.5 * forward)
    unfused = 3 * forward * (2 if hf is GPT2 else 1)
    assert prof.flops_per_step - fused + unfused == pytest.approx(flops, rel=1e-9)
    assert prof.model_family == "attention" and prof.weight_bytes == 4 * prof.params
    # the textbook count: 6 FLOPs per weight of every matmul per token (2 forward, 4 backward), the
    # LM head's vocab-sized matmul included, plus attention's two seq×seq products (QKᵀ, AV) per layer
    h, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    ffn = getattr(config, "intermediate_size", None) or 4 * h
    tokens = w.batch_size * w.seq_len
    matmul_weights = layers * (4 * h * h + 2 * h * ffn) + h * vocab + (h * h if hf is BERT else 0)  # + MLM transform
    attention = layers * 2 * 2 * w.batch_size * w.seq_len ** 2 * h
    assert prof.flops_per_step == pytest.approx(6 * matmul_weights * tokens + 3 * attention, rel=0.05)


def test_the_local_step_is_timed_on_a_real_model(dlrun_home):
    from orchestrator.estimate.profile import cached_profile, measure, workload_hash

    prof = measure(tiny())
    assert prof.local_step_seconds["cpu"] > 0 and prof.note == ""
    assert (dlrun_home / "profiles" / f"{workload_hash(tiny())}.json").exists()
    assert cached_profile(tiny()) == prof
    assert cached_profile(tiny({**BERT, "intermediate_size": 256})) is None  # cached by the config's content


def test_an_unknown_model_type_or_a_rejected_config_is_one_line():
    from orchestrator.estimate.profile import profile_now

    cases = [({"model_type": "no-such-arch"}, "workload.hf: unknown model_type 'no-such-arch' for the installed "
                                               "transformers; check the config (e.g. bert, gpt2, llama) or upgrade"),
             ({**BERT, "hidden_size": 30, "num_attention_heads": 4}, "workload.hf: transformers cannot build"),
             ({"model_type": "vit"}, "workload.hf: a vit model takes pixel_values, not token ids"),
             (BERT, "workload.seq_len: 100 is longer than the bert config's max_position_embeddings (64)")]
    for hf, expect in cases:
        with pytest.raises(SpecError) as e:
            profile_now(tiny(hf, seq_len=100 if hf is BERT else 32), measure_local=False)
        assert e.value.message.startswith(expect) and "\n" not in e.value.message, e.value.message


def test_without_transformers_the_profile_says_what_to_install(monkeypatch):
    from orchestrator.estimate.profile import profile_now

    monkeypatch.setitem(sys.modules, "transformers", None)  # what `import transformers` meets when not installed
    with pytest.raises(SpecError) as e:
        profile_now(tiny(), measure_local=False)
    assert e.value.message.startswith("workload.hf: building a Hugging Face model needs the transformers package; "
                                      "pip install transformers")


# --- dlrun plan ---------------------------------------------------------------------------------------

def test_plan_on_the_shipped_example_prints_a_plan_profiled_in_its_workdir(tmp_path):
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLE.parent / "hf_text", work / "hf_text")
    path = work / "hf_text.yaml"
    shutil.copy(EXAMPLE, path)
    result = CliRunner().invoke(cli_plan.plan_command, [str(path)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "chosen: local CPU" in result.output
    assert "profile: hf:bert from hf_text/config.json (attention), 688,208 params" in result.output
    spec = load_job(path)
    assert cached_in_workdir(spec.workload, spec.workdir).local_step_seconds["cpu"] > 0
    config = json.loads((work / "hf_text" / "config.json").read_text())
    (work / "hf_text" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    changed = load_job(path)
    assert cached_in_workdir(changed.workload, changed.workdir) is None  # a changed config is profiled again


# what `import transformers` meets on a machine without it, in dlrun and in its profiling child
NOT_INSTALLED = """
import sys

class _NoTransformers:
    def find_spec(self, name, path=None, target=None):
        if name == "transformers" or name.startswith("transformers."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, _NoTransformers())
"""


@pytest.mark.parametrize("hf, hide, expect", [
    ({"model_type": "no-such-arch"}, False, "dlrun: error: workload.hf: unknown model_type 'no-such-arch' for the "
     "installed transformers; check the config (e.g. bert, gpt2, llama) or upgrade transformers"),
    (BERT, True, "dlrun: error: workload.hf: building a Hugging Face model needs the transformers package; "
     "pip install transformers (or describe the model with model: and input_shape)"),
])
def test_dlrun_plan_exits_2_with_one_line(tmp_path, hf, hide, expect):
    if hide:
        guard = tmp_path / "net-guard" / "sitecustomize.py"
        guard.write_text(guard.read_text() + NOT_INSTALLED)
    path = job(tmp_path, {"hf": hf, "seq_len": 8, "batch_size": 2, "dataset_size": 4, "epochs": 1}, workdir=".")
    (tmp_path / "train.py").write_text("print('ok')\n")
    proc = subprocess.run([str(Path(sys.executable).parent / "dlrun"), "plan", str(path)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("[dlrun] profiling")]
    assert lines == [expect], proc.stderr
