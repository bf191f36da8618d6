"""`workload: {hf: ...}`: a Hugging Face model described by its config, built from it for profiling.

The config comes from a config.json (a file, or a directory holding one), from the local Hugging Face
cache by model name (never downloaded: dlrun only reads what is already on disk), or inline in the job
file. Reading it needs no transformers; building the model does (it is an optional package), on the
meta device for the FLOP and memory profile and on the CPU for the timed local steps, like `model:`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.errors import SpecError

FIELD = "workload.hf"
# the heads whose forward takes `labels` shaped like the token ids and returns the model's own loss
_LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForConditionalGeneration")
# (an encoder such as BERT is in both LM mappings: its masked-LM head is the one it is trained with)
_AUTO_HEADS = ("AutoModelForMaskedLM", "AutoModelForCausalLM", "AutoModelForSeq2SeqLM")
NO_TRANSFORMERS = (f"{FIELD}: building a Hugging Face model needs the transformers package; "
                   "pip install transformers (or describe the model with model: and input_shape)")


def config_name(hf: str | dict[str, Any]) -> str:
    """What the user called the model: the name or path they wrote, else the config's model_type."""
    if isinstance(hf, str):
        return hf
    model_type, name = str(hf.get("model_type")), hf.get("_name_or_path")
    if not name:
        return model_type
    return f"{model_type} from {name}" if _looks_like_path(str(name)) else str(name)


def resolve_config(hf: str | dict[str, Any], base: Path, where: str) -> dict[str, Any]:
    """The config as a mapping: inline as given, else read from a path (relative to `base`, the job
    file's directory) or from the local Hugging Face cache; the name the user wrote is kept as
    `_name_or_path`, as transformers itself records it."""
    if isinstance(hf, dict):
        return hf
    path = Path(hf).expanduser()
    path = path if path.is_absolute() else base / path
    if path.is_dir():
        path = path / "config.json"
    elif not path.exists() and not _looks_like_path(hf):
        path = _cached_config(hf, where)
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{where}: {FIELD}: no config at {path}; give a config.json, a directory "
                        "with one, a model name in the local Hugging Face cache, or an inline config") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SpecError(f"{where}: {FIELD}: cannot read {path} as a JSON config ({type(e).__name__}); "
                        "check the file") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise SpecError(f"{where}: {FIELD}: {path} has no model_type; a Hugging Face config.json names "
                        "its architecture (e.g. \"model_type\": \"bert\")")
    return {**config, "_name_or_path": hf}


def _looks_like_path(text: str) -> bool:
    """A file or directory rather than a Hugging Face model id (`bert-base-uncased`, `org/name`)."""
    return text.endswith(".json") or text.startswith((".", "/", "~")) or text.count("/") > 1


def _cached_config(name: str, where: str) -> Path:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        raise SpecError(f"{where}: {FIELD}: '{name}' is not a file; looking it up in the Hugging Face "
                        "cache needs the transformers package (pip install transformers)") from None
    found = try_to_load_from_cache(name, "config.json")
    if not isinstance(found, str):
        raise SpecError(f"{where}: {FIELD}: '{name}' is neither a config file nor in the local Hugging Face "
                        "cache (dlrun downloads nothing); give the path of its config.json or an inline config")
    return Path(found)


def config_object(config: dict[str, Any]):
    """The transformers config for a mapping; an unknown model_type or a rejected value is a SpecError."""
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:
        raise SpecError(NO_TRANSFORMERS) from None
    model_type = str(config.get("model_type"))
    try:
        config_class = CONFIG_MAPPING[model_type]
    except KeyError:
        raise SpecError(f"{FIELD}: unknown model_type '{model_type}' for the installed transformers; "
                        "check the config (e.g. bert, gpt2, llama) or upgrade transformers") from None
    fields = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version", "_name_or_path")}
    try:
        return config_class(**fields)
    except (TypeError, ValueError) as e:
        raise SpecError(f"{FIELD}: the {model_type} config is invalid ({(str(e).splitlines() or [''])[0]}); "
                        "fix the config") from None


def _model_maker(config):
    """The config's own architecture class when it names one, else the first language-model head that takes it."""
    import transformers

    for name in config.architectures or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    for auto_name in _AUTO_HEADS:
        auto = getattr(transformers, auto_name)
        if type(config) in auto._model_mapping:
            return auto.from_config
    return transformers.AutoModel.from_config


def build_training_model(config: dict[str, Any], seq_len: int):
    """The model as a module that takes a batch of token ids and returns its training loss."""
    import torch.nn as nn

    hf_config = config_object(config)
    from transformers.utils import logging as hf_logging

    # transformers' advice on a config (token ids outside a tiny vocabulary, a default loss chosen) is
    # printed once per process: in dlrun's own process it would only clutter the plan
    hf_logging.set_verbosity_error()
    limit = getattr(hf_config, "max_position_embeddings", None)
    if isinstance(limit, int) and seq_len > limit:
        raise SpecError(f"workload.seq_len: {seq_len} is longer than the {hf_config.model_type} config's "
                        f"max_position_embeddings ({limit}); give a shorter seq_len")
    try:
        model = _model_maker(hf_config)(hf_config)
    except (ValueError, TypeError, AttributeError) as e:
        raise SpecError(f"{FIELD}: transformers cannot build a {hf_config.model_type} model from this config "
                        f"({(str(e).splitlines() or [''])[0]}); fix the config") from None
    if model.main_input_name != "input_ids":
        raise SpecError(f"{FIELD}: a {hf_config.model_type} model takes {model.main_input_name}, not token ids; "
                        "describe it with model: and input_shape instead")

    class HfTraining(nn.Module):
        """Token ids in, the loss the model's head computes out (its first output where it has none)."""
        dlrun_family = "attention"

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            head = type(self.model).__name__
            if head.endswith(_LM_HEADS):
                return self.model(input_ids=input_ids, labels=input_ids).loss
            if head.endswith("ForSequenceClassification"):
                labels = input_ids.new_zeros(input_ids.shape[0])
                return self.model(input_ids=input_ids, labels=labels).loss
            return self.model(input_ids=input_ids)[0]

    return HfTraining()
