"""`workload:` of a job file: the model the estimator profiles, as a factory or a Hugging Face config."""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)  # as every section of the job file

    model: str | None = Field(default=None, description="model factory, module:callable (e.g. jobs.cnn:SimpleCNN)")
    model_kwargs: dict[str, Any] = Field(default_factory=dict)
    input_shape: list[int] | None = Field(default=None, min_length=1, description="one sample's shape (with model:)")
    input_dtype: Literal["float32", "long"] = "float32"
    hf: str | dict[str, Any] | None = Field(
        default=None, description="a Hugging Face config instead of model: a config.json, a directory with one, "
                                  "a model name in the local Hugging Face cache, or an inline mapping with model_type")
    seq_len: int | None = Field(default=None, ge=1, description="tokens per sample (with hf:)")
    num_classes: int = Field(default=10, ge=1)
    batch_size: int = Field(..., ge=1)
    dataset_size: int = Field(..., ge=1)
    epochs: int = Field(..., ge=1)
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    optimizer: Literal["adam", "adamw", "sgd"] = "adam"
    # what the estimator cannot see in the model: unset means PyTorch's default (and keeps a job's hash)
    tf32: bool | None = Field(
        default=None, description="matmuls in TF32 too, as torch.set_float32_matmul_precision('high') (default "
                                  "false: PyTorch runs fp32 convolutions and RNNs as TF32 on Ampere and later, "
                                  "matmuls in full fp32)")
    memory_format: Literal["contiguous", "channels_last"] | None = Field(
        default=None, description="the model's and batch's memory format (default contiguous; channels_last as "
                                  "model.to(memory_format=torch.channels_last))")
    optimizer_impl: Literal["foreach", "fused", "for-loop"] | None = Field(
        default=None, description="how the optimizer runs (default foreach, as PyTorch on CUDA; fused as "
                                  "Adam(fused=True); for-loop as foreach=False)")

    @field_validator("model")
    @classmethod
    def _factory(cls, v):
        if v is not None and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", v):
            raise ValueError(f"'{v}' is not module:callable (e.g. jobs.cnn:SimpleCNN)")
        return v

    @field_validator("input_shape")
    @classmethod
    def _shape(cls, v):
        if v is not None and any(d < 1 for d in v):
            raise ValueError("every dimension must be >= 1")
        return v

    @field_validator("hf")
    @classmethod
    def _hf(cls, v):
        if isinstance(v, dict) and not isinstance(v.get("model_type"), str):
            raise ValueError("an inline config names its architecture: add model_type (e.g. bert, gpt2)")
        if isinstance(v, str) and not v.strip():
            raise ValueError("give a config.json path, a directory, a cached model name or an inline config")
        return v

    @model_validator(mode="after")
    def _one_model(self):
        if (self.model is None) == (self.hf is None):
            raise ValueError("give either 'model:' (a factory, with input_shape) or 'hf:' (a Hugging Face "
                             "config, with seq_len), not both or neither")
        if self.model is not None and self.input_shape is None:
            raise ValueError("'model:' needs input_shape (one sample's shape, e.g. [1, 8, 8])")
        if self.hf is not None and self.seq_len is None:
            raise ValueError("'hf:' needs seq_len (tokens per sample, e.g. 128)")
        if self.hf is not None and (self.input_shape is not None or self.model_kwargs):
            raise ValueError("input_shape and model_kwargs go with 'model:'; an 'hf:' model takes seq_len and "
                             "its config")
        return self

    @property
    def label(self) -> str:
        """The model as the user named it: the factory, or hf:NAME."""
        if self.model is not None:
            return self.model
        from orchestrator.estimate.hf_workload import config_name

        assert self.hf is not None  # _one_model: either model or hf
        return f"hf:{config_name(self.hf)}"

    @property
    def sample_shape(self) -> list[int]:
        if self.input_shape is not None:
            return list(self.input_shape)
        assert self.seq_len is not None  # _one_model: a model has input_shape, an hf config seq_len
        return [self.seq_len]

    @property
    def math(self) -> tuple[bool, str, str]:
        """(tf32, memory_format, optimizer_impl) with PyTorch's defaults filled in."""
        return bool(self.tf32), self.memory_format or "contiguous", self.optimizer_impl or "foreach"

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.dataset_size // self.batch_size)
