"""The position of a tf.data iterator as an Orbax checkpoint item.

Orbax has no tf.data handler; this one writes one `tf.train.Checkpoint` per
process into the item directory, since each host reads its own files and has
its own position. TensorFlow is imported here and nowhere else in
`checkpoints/`, and this module only when a checkpoint has an iterator.
"""
import dataclasses
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
import tensorflow as tf


def _iterator_file(directory) -> str:
    # One file per host: each host's iterator has its own position.
    return os.fspath(directory / f"process_{jax.process_index()}-of-{jax.process_count()}")


class IteratorHandler(ocp.CheckpointHandler):
    """Saves/restores a tf.data iterator's position via `tf.train.Checkpoint`.

    Orbax has no tf.data handler; this one writes one TF checkpoint per process
    into the item directory. Use it through `ocp.args` as `IteratorSave(it)` /
    `IteratorRestore(it)` in a `CheckpointManager` composite.
    """

    def save(self, directory, args: "IteratorSave"):
        """Writes this process's iterator state (synchronously: the caller moves on)."""
        tf.train.Checkpoint(iterator=args.iterator).write(_iterator_file(directory))

    def restore(self, directory, args: "IteratorRestore"):
        """Moves `args.iterator` (built from the same pipeline) to the saved position."""
        path = _iterator_file(directory)
        if not tf.io.gfile.exists(path + ".index"):
            raise FileNotFoundError(f"no iterator checkpoint {path}")
        tf.train.Checkpoint(iterator=args.iterator).read(path).assert_consumed()
        return args.iterator


@ocp.args.register_with_handler(IteratorHandler, for_save=True)
@dataclasses.dataclass
class IteratorSave(ocp.args.CheckpointArgs):
    """`ocp.args` entry that saves a tf.data (numpy) iterator's position."""

    iterator: Any


@ocp.args.register_with_handler(IteratorHandler, for_restore=True)
@dataclasses.dataclass
class IteratorRestore(ocp.args.CheckpointArgs):
    """`ocp.args` entry that restores a tf.data (numpy) iterator's position in place."""

    iterator: Any
