"""The `bert_jax` checkpoint folder: params for fine-tuning and export.

    DIR/config.json            the BertConfig (bert_jax.model.config)
    DIR/params/                an Orbax PyTree of the parameters, nested by path
    DIR/vocab.txt              the WordPiece vocabulary, when known
    DIR/tokenizer_config.json  do_lower_case and special tokens (transformers' file)
    DIR/task.json              a fine-tuned model's head: architecture, labels

Parameters use the paths of our models (checkpoints.flat_params): the encoder
under `bert/`, with pretraining heads (`mlm_head/`, `nsp_head/`) or a task
head (`classifier/`, `qa_outputs/`).
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from bert_jax.checkpoints.flat_params import (
    CheckpointData,
    TaskHead,
    flatten,
    nest,
    read_do_lower_case,
    vocab_file_beside,
    write_tokenizer_files,
)
from bert_jax.fileio.atomic_output import atomic_directory
from bert_jax.model.config import BertConfig

CONFIG_FILE = "config.json"
PARAMS_DIR = "params"
VOCAB_FILE = "vocab.txt"
TASK_FILE = "task.json"


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
         vocab_file: str | None = None, overwrite: bool = False,
         do_lower_case: bool | None = None, task: TaskHead | None = None,
         task_meta: dict | None = None) -> None:
    """Writes a bert_jax checkpoint folder atomically.

    The tokenizer travels with it (vocab.txt, and tokenizer_config.json when
    the casing is known); a fine-tuned head is described in task.json
    (`task`, plus any `task_meta` such as the task's name).
    """
    with atomic_directory(path, overwrite=overwrite) as tmp:
        config.to_json_file(os.path.join(tmp, CONFIG_FILE))
        tree = nest({k: np.asarray(v) for k, v in flat.items()})
        with _this_process_only_checkpointer() as checkpointer:
            checkpointer.save(os.path.join(tmp, PARAMS_DIR), tree)
        write_tokenizer_files(tmp, vocab_file, do_lower_case, config.max_position_embeddings)
        if task is not None:
            with open(os.path.join(tmp, TASK_FILE), "w") as f:
                json.dump({**(task_meta or {}), **dataclasses.asdict(task)}, f, indent=2,
                          sort_keys=True)
                f.write("\n")


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
    task = None
    if os.path.exists(os.path.join(path, TASK_FILE)):
        with open(os.path.join(path, TASK_FILE)) as f:
            meta = json.load(f)
        task = TaskHead(meta["architecture"], tuple(meta.get("labels", ())),
                        meta.get("problem_type", ""))
    return CheckpointData(config, flatten(tree), [], vocab_file_beside(path),
                          read_do_lower_case(path), task)
