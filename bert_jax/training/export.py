"""A run's parameters as a `bert_jax` checkpoint folder (what fine-tuning and convert read)."""
from __future__ import annotations

from typing import Callable

import jax
from flax import nnx
from jax.experimental import multihost_utils

from bert_jax.checkpoints import bert_jax_folder
from bert_jax.checkpoints.flat_params import TaskHead, flat_params
from bert_jax.model.config import BertConfig


def export_params(params: dict, model_config: BertConfig, make_model: Callable[[], nnx.Module],
                  path: str, vocab_file: str | None = None, do_lower_case: bool | None = None,
                  task: TaskHead | None = None, task_meta: dict | None = None) -> bool:
    """Writes the (possibly sharded) `params` of `make_model()`'s model to `path`.

    Every process takes part in gathering the parameters; process 0 writes
    (atomically, replacing an older export), with the tokenizer files and,
    for a fine-tuned model, its head (`task`). Returns whether this process
    wrote.
    """
    model = nnx.eval_shape(make_model)
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, multihost_utils.process_allgather(params, tiled=True))
    if jax.process_index() != 0:
        return False
    nnx.update(model, state)
    bert_jax_folder.save(path, model_config, flat_params(model), vocab_file=vocab_file,
                         overwrite=True, do_lower_case=do_lower_case, task=task,
                         task_meta=task_meta)
    return True
