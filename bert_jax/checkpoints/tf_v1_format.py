"""google-research/bert TF v1 checkpoints: read `bert_model.ckpt` + `bert_config.json`.

Optimizer slots (`adam_m`, `adam_v`, LAMB's) and `global_step` are skipped.
Its `"gelu"` is the tanh approximation, so it becomes our `gelu_tanh`.
TensorFlow is imported only when a checkpoint is actually read.
"""
from __future__ import annotations

import glob
import json
import os

from bert_jax.checkpoints.flat_params import CheckpointData, vocab_file_beside
from bert_jax.checkpoints.weight_names import import_tensors, weight_names
from bert_jax.model.config import BertConfig

_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu", "tanh": "tanh"}
_CONFIG_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
                  "max_position_embeddings", "type_vocab_size", "initializer_range")
# Fields of multilingual/Chinese configs that describe nothing we would change.
_IGNORED_FIELDS = ("directionality", "pooler_fc_size", "pooler_num_attention_heads",
                   "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type")
_SKIPPED_SUFFIXES = ("/adam_m", "/adam_v", "/lamb_m", "/lamb_v", "/Momentum")
_SKIPPED_NAMES = ("global_step", "bad_steps", "good_steps", "loss_scale")


def read_config(path: str) -> BertConfig:
    """Our BertConfig from google-research/bert's bert_config.json."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"bert_config.json not found: {path}")
    with open(path) as f:
        values = json.load(f)
    unknown = sorted(set(values) - set(_CONFIG_FIELDS) - {"hidden_act"} - set(_IGNORED_FIELDS))
    if unknown:
        raise ValueError(f"{path}: unsupported config field(s) {unknown}")
    act = values.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise ValueError(f"{path}: hidden_act={act!r} is not supported; supported: "
                         f"{sorted(_ACTIVATIONS)}")
    return BertConfig(hidden_act=_ACTIVATIONS[act], layer_norm_eps=1e-12,
                      **{k: values[k] for k in _CONFIG_FIELDS if k in values})


def _resolve(path: str) -> tuple[str, str]:
    """(checkpoint prefix, bert_config.json) from a folder or a prefix."""
    if os.path.isdir(path):
        indexes = sorted(glob.glob(os.path.join(path, "*.index")))
        if not indexes:
            raise FileNotFoundError(f"{path}: no TF checkpoint (*.index) in this folder")
        prefix = os.path.join(path, "bert_model.ckpt")
        if not os.path.exists(prefix + ".index"):
            prefix = indexes[0][:-len(".index")]
        return prefix, os.path.join(path, "bert_config.json")
    if not os.path.exists(path + ".index"):
        raise FileNotFoundError(f"TF checkpoint not found: {path} (no {path}.index)")
    return path, os.path.join(os.path.dirname(path), "bert_config.json")


def load(path: str, config_file: str | None = None) -> CheckpointData:
    """Reads a google-research/bert checkpoint (folder, or `.../bert_model.ckpt` prefix).

    The params are in our layout; `missing` lists the absent heads.
    """
    prefix, default_config = _resolve(path)
    config = read_config(config_file or default_config)
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    variables = {name for name in reader.get_variable_to_shape_map()
                 if not name.endswith(_SKIPPED_SUFFIXES) and name not in _SKIPPED_NAMES}
    names = weight_names(config)
    unknown = sorted(variables - {n.tf for n in names})
    if unknown:
        raise ValueError(f"{prefix}: unknown tensor(s) {unknown[:8]} ({len(unknown)} in all)")
    flat, report = import_tensors(config, variables, reader.get_tensor, "tf", prefix)
    return CheckpointData(config, flat, report, vocab_file_beside(os.path.dirname(prefix)))
