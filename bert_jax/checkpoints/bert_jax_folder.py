"""The `bert_jax` checkpoint folder: params for fine-tuning and export.

    DIR/config.json   the BertConfig (bert_jax.model_config)
    DIR/params/       an Orbax PyTree of the parameters, nested by path
    DIR/vocab.txt     the WordPiece vocabulary, when known

Parameters use the paths of `BertForPreTraining` (bert_jax.params), so the
folder may hold the encoder alone or the encoder with its pretraining heads.
"""
from __future__ import annotations

import os
import shutil

import numpy as np

from bert_jax.checkpoints.flat_params import CheckpointData, flatten, nest, vocab_file_beside
from bert_jax.fileio.atomic_output import atomic_directory
from bert_jax.model.config import BertConfig

CONFIG_FILE = "config.json"
PARAMS_DIR = "params"
VOCAB_FILE = "vocab.txt"


def _this_process_only_checkpointer():
    """An Orbax checkpointer for host numpy values that syncs with no other process.

    In a multi-process job one process writes the export (and any process may
    read one); Orbax's default would wait at a barrier for all of them.
    """
    import jax
    import orbax.checkpoint as ocp

    me = jax.process_index()
    options = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
    return ocp.Checkpointer(ocp.PyTreeCheckpointHandler(multiprocessing_options=options),
                            multiprocessing_options=options)


def save(path: str, config: BertConfig, flat: dict[str, np.ndarray], *,
         vocab_file: str | None = None, overwrite: bool = False) -> None:
    """Writes a bert_jax checkpoint folder atomically."""
    with atomic_directory(path, overwrite=overwrite) as tmp:
        config.to_json_file(os.path.join(tmp, CONFIG_FILE))
        tree = nest({k: np.asarray(v) for k, v in flat.items()})
        with _this_process_only_checkpointer() as checkpointer:
            checkpointer.save(os.path.join(tmp, PARAMS_DIR), tree)
        if vocab_file:
            shutil.copyfile(vocab_file, os.path.join(tmp, VOCAB_FILE))


def is_checkpoint(path: str) -> bool:
    """True if `path` looks like a bert_jax checkpoint folder."""
    return (os.path.isfile(os.path.join(path, CONFIG_FILE))
            and os.path.isdir(os.path.join(path, PARAMS_DIR)))


def load(path: str) -> CheckpointData:
    """Reads a bert_jax folder (nothing is ever missing from one)."""
    if not os.path.isdir(path):
        raise FileNotFoundError(f"bert_jax checkpoint folder not found: {path}")
    if not is_checkpoint(path):
        raise FileNotFoundError(f"{path} is not a bert_jax checkpoint: it needs {CONFIG_FILE} and "
                                f"{PARAMS_DIR}/")
    config = BertConfig.from_json_file(os.path.join(path, CONFIG_FILE))
    with _this_process_only_checkpointer() as checkpointer:
        tree = checkpointer.restore(os.path.abspath(os.path.join(path, PARAMS_DIR)))
    return CheckpointData(config, flatten(tree), [], vocab_file_beside(path))
