"""The BERT model configuration and the size presets.

`BertConfig` holds the architecture (the fields of google-research/bert's
`bert_config.json`, under the same names) plus how we compute: the compute
dtype and the parameter dtype. It is what a `bert_jax` checkpoint stores as
`config.json`, and what the converters read from and write to the Hugging Face
and google-research/bert configs.
"""
from __future__ import annotations

import dataclasses
import json
import os

# Activations we implement, by the name a checkpoint's config uses.
# google-research/bert's "gelu" is the tanh approximation; Hugging Face's "gelu"
# is the exact erf form. The converters translate their names to these.
ACTIVATIONS = ("gelu", "gelu_tanh", "relu", "tanh")
DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Architecture and numerics of a BERT encoder."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"  # one of ACTIVATIONS; "gelu" is exact (erf)
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02  # stddev of the truncated normal init
    layer_norm_eps: float = 1e-12
    dtype: str = "float32"  # compute dtype of activations and matmuls
    param_dtype: str = "float32"  # storage dtype of parameters

    def __post_init__(self):
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"model.hidden_act={self.hidden_act!r} is not one of {ACTIVATIONS}")
        for field in ("dtype", "param_dtype"):
            if getattr(self, field) not in DTYPES:
                raise ValueError(f"model.{field}={getattr(self, field)!r} is not one of {DTYPES}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"model.hidden_size={self.hidden_size} is not a multiple of "
                f"model.num_attention_heads={self.num_attention_heads}")
        for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                      "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, field) <= 0:
                raise ValueError(f"model.{field} must be positive, got {getattr(self, field)}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def replace(self, **changes) -> "BertConfig":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> "BertConfig":
        """Builds a config, naming any field we do not know."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source}: unknown BertConfig field(s) {unknown}; "
                             f"known: {sorted(known)}")
        return cls(**values)

    def to_json_file(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=True)
            f.write("\n")

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        if not os.path.exists(path):
            raise FileNotFoundError(f"model config not found: {path}")
        with open(path) as f:
            try:
                values = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from e
        return cls.from_dict(values, source=path)


def _preset(layers: int, hidden: int, heads: int) -> BertConfig:
    # Feed-forward width is 4x hidden in every published BERT size.
    return BertConfig(num_hidden_layers=layers, hidden_size=hidden,
                      num_attention_heads=heads, intermediate_size=4 * hidden)


# The sizes of google-research/bert's README (tiny..medium are its
# "Well-Read Students" compact models), plus base and large.
PRESETS = {
    "tiny": _preset(2, 128, 2),
    "mini": _preset(4, 256, 4),
    "small": _preset(4, 512, 8),
    "medium": _preset(8, 512, 8),
    "base": _preset(12, 768, 12),
    "large": _preset(24, 1024, 16),
}


def preset(name: str) -> BertConfig:
    """Returns the BertConfig preset `name` (tiny, mini, small, medium, base, large)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]
