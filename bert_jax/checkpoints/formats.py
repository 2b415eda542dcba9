"""Read, write and detect BERT checkpoints: Hugging Face, google-research/bert, bert_jax.

    from bert_jax.checkpoints import load_model, read_checkpoint
    read = read_checkpoint("path/to/checkpoint")  # CheckpointData: config, params, ...
    classifier = load_model("path/to/checkpoint", BertForSequenceClassification, num_labels=2)

Every format is read into one flat dict of numpy arrays under the parameter
paths of `BertForPreTraining` (checkpoints.flat_params), so any checkpoint
loads into any of our models; `python -m bert_jax.convert` is the CLI.
"""
from __future__ import annotations

import os

import numpy as np
from flax import nnx

from bert_jax.checkpoints import bert_jax_folder, hf_format, tf_v1_format
from bert_jax.checkpoints.flat_params import (
    CheckpointData,
    TaskHead,
    load_flat_params,
    param_paths,
    write_tokenizer_files,
)
from bert_jax.checkpoints.weight_names import ENCODER_PREFIX
from bert_jax.fileio.atomic_output import atomic_directory
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.task_models import BertForPreTraining

INPUT_FORMATS = ("hf", "tf_v1", "bert_jax")
OUTPUT_FORMATS = ("bert_jax", "hf")


def read_checkpoint(path: str, fmt: str | None = None) -> CheckpointData:
    """Reads a checkpoint of format `fmt` (detected from its files when None)."""
    if not os.path.exists(path) and not os.path.exists(path + ".index"):
        raise FileNotFoundError(f"checkpoint path does not exist: {path}")
    fmt = fmt or detect_format(path)
    readers = {"hf": hf_format.load, "tf_v1": tf_v1_format.load, "bert_jax": bert_jax_folder.load}
    if fmt not in readers:
        raise ValueError(f"checkpoint format {fmt!r} is not one of {INPUT_FORMATS}")
    return readers[fmt](path)


def write_checkpoint(path: str, fmt: str, config: BertConfig, flat: dict[str, np.ndarray], *,
                     vocab_file: str | None = None, overwrite: bool = False,
                     do_lower_case: bool | None = None, task: TaskHead | None = None) -> None:
    """Writes a checkpoint atomically (temporary folder, then rename).

    The tokenizer goes with it: vocab.txt, and tokenizer_config.json when
    `do_lower_case` is known. `task`: a fine-tuned head to write as its
    transformers architecture (hf) or task.json (bert_jax).
    """
    if fmt == "bert_jax":
        bert_jax_folder.save(path, config, flat, vocab_file=vocab_file, overwrite=overwrite,
                             do_lower_case=do_lower_case, task=task)
    elif fmt == "hf":
        with atomic_directory(path, overwrite=overwrite) as tmp:
            hf_format.save(tmp, config, flat, task)
            write_tokenizer_files(tmp, vocab_file, do_lower_case, config.max_position_embeddings)
    else:
        raise ValueError(f"--output_format={fmt!r} is not one of {OUTPUT_FORMATS}")


def read_config(path: str, fmt: str) -> BertConfig:
    """Only the model config of a checkpoint (cheap: no weights are read)."""
    if fmt == "hf":
        return hf_format.read_config(path)
    if fmt == "tf_v1":
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        return tf_v1_format.read_config(os.path.join(folder, "bert_config.json"))
    if fmt == "bert_jax":
        return BertConfig.from_json_file(os.path.join(path, bert_jax_folder.CONFIG_FILE))
    raise ValueError(f"format {fmt!r} is not one of {INPUT_FORMATS}")


def detect_format(path: str) -> str:
    """Guesses a checkpoint's format from the files in it."""
    if bert_jax_folder.is_checkpoint(path):
        return "bert_jax"
    if os.path.isdir(os.path.join(path, "checkpoints")):
        if os.path.isdir(os.path.join(path, "best")):
            raise ValueError(f"{path} is a fine-tuning workdir, not a checkpoint: use "
                             f"{path}/best (the best checkpoint by the task's main metric)")
        raise ValueError(f"{path} is a pretraining workdir, not a checkpoint: use {path}/export "
                         "(or, to continue its optimizer state, train.init_mode='full')")
    weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    if (os.path.isfile(os.path.join(path, "config.json"))
            and any(os.path.isfile(os.path.join(path, w)) for w in weights)):
        return "hf"
    if os.path.exists(path + ".index") or os.path.isfile(os.path.join(path, "bert_config.json")):
        return "tf_v1"
    raise ValueError(f"cannot tell the format of {path}: expected a bert_jax folder, a Hugging "
                     "Face folder (config.json) or a google-research/bert checkpoint")


def load_model(path: str, model_class=BertForPreTraining, fmt: str | None = None,
               config_overrides: dict | None = None, seed: int = 0, **model_kwargs):
    """Builds `model_class(config, **model_kwargs)` with a checkpoint's weights.

    Parameters the checkpoint lacks that belong to a task head (not under
    `bert/`) keep their fresh initialization; anything missing from the
    encoder raises. `config_overrides` changes non-architectural fields
    (dtype, dropout).
    """
    read = read_checkpoint(path, fmt)
    config, flat = read.config.replace(**(config_overrides or {})), read.params
    def build():
        return model_class(config, rngs=nnx.Rngs(seed), **model_kwargs)

    # Shapes only: running every initializer just to overwrite it is slow.
    model = nnx.eval_shape(build)
    if model_class is BertModel:  # the bare encoder has no `bert/` level
        flat = {k[len(ENCODER_PREFIX):]: v for k, v in flat.items() if k.startswith(ENCODER_PREFIX)}
    wanted = param_paths(model)
    task_heads = ()
    if not wanted <= set(flat):
        model = build()  # the heads the checkpoint lacks start from their init
        if model_class not in (BertModel, BertForPreTraining):
            task_heads = tuple({p.split("/")[0] + "/" for p in wanted} - {ENCODER_PREFIX})
    load_flat_params(model, flat, source=path, allow_missing=task_heads)
    return model
