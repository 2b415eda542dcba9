"""Flat parameter dictionaries: the common currency of checkpoints and converters.

A flat dict maps '/'-joined parameter paths to numpy arrays, with the paths of
`BertForPreTraining` ('bert/...', 'mlm_head/...', 'nsp_head/...'). Every model
of this package keeps its encoder under `bert`, so any model loads the entries
it has from a flat dict, and a checkpoint of any model converts to any other.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
from flax import nnx

from bert_jax.model.config import BertConfig

TOKENIZER_CONFIG = "tokenizer_config.json"


@dataclasses.dataclass(frozen=True)
class TaskHead:
    """The fine-tuned head a checkpoint carries besides the encoder."""

    architecture: str  # transformers' class: BertForSequenceClassification, ...
    labels: tuple[str, ...] = ()  # label names in id order; () for regression / spans
    problem_type: str = ""  # transformers' problem_type ("regression", ...)


@dataclasses.dataclass(frozen=True)
class CheckpointData:
    """What a checkpoint reader found, in any format."""

    config: BertConfig
    params: dict[str, np.ndarray]  # flat: '/'-joined model paths -> arrays
    missing: list[str]  # parts the checkpoint lacks (e.g. "no pooler"), one line each
    vocab_file: str | None = None  # the vocab.txt stored beside the weights, if any
    do_lower_case: bool | None = None  # from tokenizer_config.json; None: not recorded
    task: TaskHead | None = None  # a fine-tuned head (classifier/, qa_outputs/), if any


def vocab_file_beside(folder: str) -> str | None:
    """FOLDER/vocab.txt if it exists (every format keeps its vocabulary there)."""
    path = os.path.join(folder, "vocab.txt")
    return path if os.path.exists(path) else None


def read_do_lower_case(folder: str) -> bool | None:
    """do_lower_case of FOLDER/tokenizer_config.json (transformers' file), if recorded."""
    path = os.path.join(folder, TOKENIZER_CONFIG)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        value = json.load(f).get("do_lower_case")
    return None if value is None else bool(value)


def write_tokenizer_files(folder: str, vocab_file: str | None, do_lower_case: bool | None,
                          model_max_length: int) -> None:
    """vocab.txt, tokenizer_config.json and special_tokens_map.json, as transformers reads them.

    `AutoTokenizer.from_pretrained(folder)` then tokenizes as our FullTokenizer
    does, with the casing the model was trained with (never lower-casing a
    cased model by default).
    """
    if vocab_file:
        shutil.copyfile(vocab_file, os.path.join(folder, "vocab.txt"))
    if do_lower_case is None:
        return
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
               "cls_token": "[CLS]", "mask_token": "[MASK]"}
    config = {"tokenizer_class": "BertTokenizer", "do_lower_case": bool(do_lower_case),
              "strip_accents": None, "tokenize_chinese_chars": True, "do_basic_tokenize": True,
              "model_max_length": model_max_length, **special}
    for name, values in ((TOKENIZER_CONFIG, config), ("special_tokens_map.json", special)):
        with open(os.path.join(folder, name), "w") as f:
            json.dump(values, f, indent=2, sort_keys=True)
            f.write("\n")


def _path_str(path) -> str:
    return "/".join(str(getattr(k, "key", k)) for k in path)


def flat_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """The model's parameters as {path: numpy array}."""
    state = nnx.state(model, nnx.Param)
    return {_path_str(path): np.asarray(var[...]) for path, var in nnx.to_flat_state(state)}


def param_paths(model: nnx.Module) -> set[str]:
    """The '/'-joined paths of the model's parameters (works on abstract models)."""
    return {_path_str(path) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def nest(flat: dict[str, np.ndarray]) -> dict:
    """{'a/b': x} -> {'a': {'b': x}} (for Orbax, which saves nested trees)."""
    tree: dict = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return tree


def flatten(tree: dict, prefix: str = "") -> dict[str, np.ndarray]:
    """The inverse of `nest`."""
    flat = {}
    for key, value in tree.items():
        path = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(flatten(value, path))
        else:
            flat[path] = np.asarray(value)
    return flat


def load_flat_params(model: nnx.Module, flat: dict[str, np.ndarray], *, source: str = "checkpoint",
                     allow_missing: tuple[str, ...] = ()) -> list[str]:
    """Assigns `flat` to the model's parameters, in place.

    Entries the model has no parameter for (e.g. pretraining heads when loading
    a classifier) are ignored and returned. A parameter missing from `flat`
    raises, naming it, unless its path starts with one of `allow_missing`
    (a fine-tuning head that starts from its initialization). A shape that
    disagrees raises, naming the tensor and both shapes.
    """
    state = nnx.state(model, nnx.Param)
    flat_state = list(nnx.to_flat_state(state))
    wanted = {_path_str(path) for path, _ in flat_state}
    missing = sorted(p for p in wanted - set(flat) if not p.startswith(allow_missing))
    if missing:
        raise KeyError(f"{source}: missing tensor(s) {missing[:8]}"
                       f"{' ...' if len(missing) > 8 else ''} ({len(missing)} in all)")
    for path, var in flat_state:
        name = _path_str(path)
        if name not in flat:
            continue
        value = np.asarray(flat[name])
        if value.shape != var.shape:
            raise ValueError(f"{source}: tensor {name} has shape {value.shape}, the model config "
                             f"expects {var.shape}")
        # set_value also fills the abstract variables of an nnx.eval_shape model.
        var.set_value(jnp.asarray(value, var.dtype))
    nnx.update(model, state)
    return sorted(set(flat) - wanted)
