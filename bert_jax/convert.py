"""Convert BERT checkpoints between Hugging Face, google-research/bert and bert_jax.

    python -m bert_jax.convert --input PATH --input_format {hf,tf_v1,bert_jax} \
        --output PATH --output_format {bert_jax,hf} [--vocab_file V] [--overwrite]

Python API: `read_checkpoint(path, fmt)` -> (config, flat params, report,
vocab), `write_checkpoint(...)`, and `load_model(path, model_class)` which builds
any of our models from any readable checkpoint.
"""
from __future__ import annotations

import os
import shutil
import sys

import numpy as np
from absl import app, flags, logging
from flax import nnx

from bert_jax import bert_checkpoint, hf_interop, tf_interop
from bert_jax.atomic_output import atomic_directory
from bert_jax.heads import BertForPreTraining
from bert_jax.model_config import BertConfig
from bert_jax.model import BertModel
from bert_jax.params import load_flat_params, param_paths
from bert_jax.weight_names import ENCODER_PREFIX

INPUT_FORMATS = ("hf", "tf_v1", "bert_jax")
OUTPUT_FORMATS = ("bert_jax", "hf")


def read_checkpoint(path: str, fmt: str
                    ) -> tuple[BertConfig, dict[str, np.ndarray], list[str], str | None]:
    """(config, flat params, report of absent parts, vocab.txt path or None)."""
    if not os.path.exists(path) and not os.path.exists(path + ".index"):
        raise FileNotFoundError(f"--input path does not exist: {path}")
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    vocab = os.path.join(folder, "vocab.txt")
    vocab = vocab if os.path.exists(vocab) else None
    if fmt == "hf":
        config, flat, report = hf_interop.load(path)
    elif fmt == "tf_v1":
        config, flat, report = tf_interop.load(path)
    elif fmt == "bert_jax":
        config, flat, vocab = bert_checkpoint.load(path)
        report = []
    else:
        raise ValueError(f"--input_format={fmt!r} is not one of {INPUT_FORMATS}")
    return config, flat, report, vocab


def write_checkpoint(path: str, fmt: str, config: BertConfig, flat: dict[str, np.ndarray], *,
                     vocab_file: str | None = None, overwrite: bool = False) -> None:
    """Writes a checkpoint atomically (temporary folder, then rename)."""
    if fmt == "bert_jax":
        bert_checkpoint.save(path, config, flat, vocab_file=vocab_file, overwrite=overwrite)
    elif fmt == "hf":
        with atomic_directory(path, overwrite=overwrite) as tmp:
            hf_interop.save(tmp, config, flat)
            if vocab_file:
                shutil.copyfile(vocab_file, os.path.join(tmp, "vocab.txt"))
    else:
        raise ValueError(f"--output_format={fmt!r} is not one of {OUTPUT_FORMATS}")


def read_config(path: str, fmt: str) -> BertConfig:
    """Only the model config of a checkpoint (cheap: no weights are read)."""
    if fmt == "hf":
        return hf_interop.read_config(path)
    if fmt == "tf_v1":
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        return tf_interop.read_config(os.path.join(folder, "bert_config.json"))
    if fmt == "bert_jax":
        return BertConfig.from_json_file(os.path.join(path, bert_checkpoint.CONFIG_FILE))
    raise ValueError(f"format {fmt!r} is not one of {INPUT_FORMATS}")


def detect_format(path: str) -> str:
    """Guesses a checkpoint's format from the files in it."""
    if bert_checkpoint.is_checkpoint(path):
        return "bert_jax"
    if os.path.isdir(os.path.join(path, "checkpoints")):
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
    config, flat, _, _ = read_checkpoint(path, fmt or detect_format(path))
    config = config.replace(**(config_overrides or {}))
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


FLAGS = flags.FLAGS


def _define_flags() -> None:
    # Defined only when run as a program, so that importing this module (as
    # other CLIs do) registers no flags.
    flags.DEFINE_string("input", None, "Checkpoint to read (folder or TF prefix).")
    flags.DEFINE_enum("input_format", None, INPUT_FORMATS, "Format of --input.")
    flags.DEFINE_string("output", None, "Folder to write.")
    flags.DEFINE_enum("output_format", "bert_jax", OUTPUT_FORMATS, "Format of --output.")
    flags.DEFINE_string("vocab_file", None, "vocab.txt to store with the output (default: the "
                        "input's own vocab.txt, if it has one).")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")


def main(argv):
    del argv
    for name in ("input", "input_format", "output"):
        if not getattr(FLAGS, name):
            raise app.UsageError(f"--{name} is required")
    config, flat, report, vocab = read_checkpoint(FLAGS.input, FLAGS.input_format)
    for line in report:
        logging.warning("%s", line)
    write_checkpoint(FLAGS.output, FLAGS.output_format, config, flat,
                     vocab_file=FLAGS.vocab_file or vocab, overwrite=FLAGS.overwrite)
    print(f"wrote {FLAGS.output_format} checkpoint {FLAGS.output} ({len(flat)} tensors, "
          f"{sum(v.size for v in flat.values()):,} parameters)", file=sys.stderr)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
