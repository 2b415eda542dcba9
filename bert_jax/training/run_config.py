"""Checks every trainer's config shares, and the record of what a run was given.

Errors name the config field at fault (`config.train.batch_size: ...`), before
any compute. Unknown fields on the command line are already rejected by
ml_collections (configs are locked).
"""
from __future__ import annotations

import json
import os

import jax
import ml_collections

from bert_jax.fileio.atomic_output import atomic_file

CONFIG_FILE = "config.json"


def fail(field: str, message: str):
    """Raises ValueError("config.FIELD: MESSAGE")."""
    raise ValueError(f"config.{field}: {message}")


def check_positive(section: ml_collections.ConfigDict, prefix: str, fields) -> None:
    """Each of `fields` of `section` must be > 0."""
    for field in fields:
        if section[field] <= 0:
            fail(f"{prefix}.{field}", f"must be positive, got {section[field]}")


def check_batch_split(field: str, batch_size: int, grad_accum_steps: int,
                      tensor_parallel: int) -> None:
    """The global batch must split over processes, micro-batches and data-parallel devices."""
    if batch_size % jax.process_count():
        fail(field, f"{batch_size} is not divisible by the {jax.process_count()} processes")
    if batch_size % grad_accum_steps:
        fail(field, f"{batch_size} is not divisible by train.grad_accum_steps="
             f"{grad_accum_steps}")
    data_shards = jax.device_count() // max(tensor_parallel, 1)
    if (batch_size // grad_accum_steps) % data_shards:
        fail(field, f"micro-batch {batch_size // grad_accum_steps} does not split over "
             f"{data_shards} data-parallel devices")


def save_config(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Writes the config as WORKDIR/config.json (what the run was given)."""
    with atomic_file(os.path.join(workdir, CONFIG_FILE), overwrite=True) as f:
        json.dump(json.loads(config.to_json_best_effort()), f, indent=2, sort_keys=True)
        f.write("\n")
