"""Training checkpoints with Orbax, and plain PyTree save/load.

A workdir's `checkpoints/` holds one directory per saved step:

    checkpoints/<step>/state/  the train state pytree (params, opt_state, step,
                               rng), sharded arrays written by every process
    checkpoints/<step>/data/   each process's tf.data iterator position (optional)
    checkpoints/<step>/meta/   JSON: whatever the trainer passes (configs)

Saves are asynchronous: `save` returns once the arrays are copied off the
devices and the iterator position is written; the files land in the
background. Orbax writes each step into `<step>.orbax-checkpoint-tmp-*` and
renames it when complete, so a crash mid-write never leaves a directory that
looks like a step; leftovers are removed when a `Checkpointer` is created.

A step that exists but cannot be read (a file deleted or truncated after the
fact) is skipped by `restore_latest` with a warning and renamed to
`<step>.corrupt-<unix time>` (kept for inspection, out of Orbax's rotation so
training can save that step again). With several processes they agree on the
step (one allgather per attempt), so all restore the same one. Limits: Orbax
keeps no checksums, so corruption that still decodes cannot be noticed; and a
damaged array file read by only some processes makes them fail inside Orbax's
collective restore, which the others then wait on (a damaged per-process
iterator file is fine: it is restored outside Orbax's barriers).
"""
import os
import time
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers

STATE, DATA, META = "state", "data", "meta"


class Restored(NamedTuple):
    """What `Checkpointer.restore_latest` found."""

    step: int
    state: Any
    meta: dict | None


def abstract_like(tree: Any) -> Any:
    """ShapeDtypeStructs (with shardings) of a pytree of arrays: a restore target."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def _all_processes_agree(ok: bool) -> bool:
    """True iff `ok` on every process (one tiny allgather, also a barrier)."""
    if jax.process_count() == 1:
        return ok
    return bool(np.min(multihost_utils.process_allgather(np.int32(ok))))


class Checkpointer:
    """Periodic, asynchronous, rotating train-state checkpoints in `workdir/checkpoints`."""

    def __init__(
        self,
        workdir: str,
        *,
        save_interval_steps: int,
        max_to_keep: int = 3,
        keep_period: int | None = None,
        async_save: bool = True,
    ):
        """Opens (or creates) the checkpoint directory.

        Args:
          workdir: the run's directory; checkpoints go to `workdir/checkpoints`.
          save_interval_steps: `should_save(step)` is true at multiples of this
            (and when JAX reports a preemption).
          max_to_keep: the newest checkpoints kept.
          keep_period: also keep every step that is a multiple of this, forever.
          async_save: write files in a background thread.
        """
        preservation = checkpoint_managers.LatestN(max_to_keep)
        if keep_period:
            preservation = checkpoint_managers.AnyPreservationPolicy(
                [preservation, checkpoint_managers.EveryNSteps(keep_period)]
            )
        options = ocp.CheckpointManagerOptions(
            save_decision_policy=checkpoint_managers.AnySavePolicy(
                [
                    checkpoint_managers.FixedIntervalPolicy(save_interval_steps),
                    checkpoint_managers.PreemptionCheckpointingPolicy(),
                ]
            ),
            preservation_policy=preservation,
            enable_async_checkpointing=async_save,
            cleanup_tmp_directories=True,
            create=True,
        )
        self.directory = epath.Path(os.path.abspath(workdir)) / "checkpoints"
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def all_steps(self) -> list[int]:
        """Saved steps (complete ones only), ascending."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest complete step, or None."""
        return self._manager.latest_step()

    def should_save(self, step: int) -> bool:
        """Whether `save(step, ...)` would write (interval reached or preemption)."""
        return self._manager.should_save(step)

    def save(
        self,
        step: int,
        state: Any,
        *,
        iterator: Any = None,
        meta: dict | None = None,
        force: bool = False,
    ) -> bool:
        """Saves if `should_save(step)` or `force` (use at the end); returns whether it did.

        Args:
          step: the train step the state is at.
          state: pytree of jax arrays (possibly sharded) and numpy values.
          iterator: the tf.data numpy iterator; its position is saved per process.
          meta: JSON-serializable dict (configs), stored beside the state.
          force: save even off the interval (not twice for the same step).
        """
        if step in self._manager.all_steps():
            return False
        if not (force or self._manager.should_save(step)):
            return False
        items = {STATE: ocp.args.StandardSave(state)}
        if iterator is not None:
            # Imported here: checkpointing itself must not pull TensorFlow into
            # programs that only save and load arrays.
            from bert_jax.checkpoints.iterator_state import IteratorSave

            items[DATA] = IteratorSave(iterator)
        if meta is not None:
            items[META] = ocp.args.JsonSave(meta)
        return self._manager.save(step, args=ocp.args.Composite(**items), force=True)

    def _restore(self, step: int, abstract_state: Any, iterator: Any) -> Restored:
        step_dir = self.directory / str(step)
        items = {STATE: ocp.args.StandardRestore(abstract_state)}
        if (step_dir / META).exists():
            items[META] = ocp.args.JsonRestore()
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        if iterator is not None:
            if (step_dir / DATA).exists():
                from bert_jax.checkpoints.iterator_state import IteratorHandler, IteratorRestore

                # Outside Orbax's collective restore: a process whose own
                # iterator file is damaged must fail alone, not leave the
                # others waiting at one of Orbax's barriers.
                IteratorHandler().restore(step_dir / DATA, IteratorRestore(iterator))
            else:
                logging.warning(
                    "Checkpoint %s has no input iterator state: input starts over.", step_dir
                )
        return Restored(step, restored[STATE], restored[META] if META in items else None)

    def restore_latest(self, abstract_state: Any, iterator: Any = None) -> Restored | None:
        """Restores the newest readable checkpoint; None if there is none.

        Args:
          abstract_state: the state's structure as `jax.ShapeDtypeStruct`s with
            the target shardings (e.g. `abstract_like(state)` or
            `jax.eval_shape` + shardings).
          iterator: if given, moved in place to the saved input position.

        Unreadable steps are skipped newest-first with a warning and moved
        aside (see the module docstring). Raises RuntimeError if checkpoints
        exist but none can be read, which usually means `abstract_state` does
        not match what was saved.
        """
        steps = self.all_steps()
        bad_steps, last_error = [], None
        for step in reversed(steps):
            try:
                restored = self._restore(step, abstract_state, iterator)
                ok = True
            # Orbax and TensorStore raise many types (ValueError, OSError,
            # JSONDecodeError, KeyError...) for a damaged step.
            except Exception as error:  # pylint: disable=broad-except
                logging.warning(
                    "Checkpoint step %d in %s cannot be restored (%s: %s); "
                    "trying the previous one.",
                    step, self.directory, type(error).__name__, error,
                )
                ok, last_error = False, error
            if _all_processes_agree(ok):
                self._quarantine(bad_steps)
                return restored
            if ok:
                logging.warning("Checkpoint step %d failed to restore on another process.", step)
            bad_steps.append(step)
        if steps:
            raise RuntimeError(
                f"none of the checkpoints {steps} in {self.directory} can be restored"
            ) from last_error
        return None

    def _quarantine(self, steps: list[int]) -> None:
        """Renames unreadable steps out of Orbax's sight (primary process only)."""
        if not steps:
            return
        if jax.process_index() == 0:
            stamp = int(time.time())
            for step in steps:
                (self.directory / str(step)).rename(self.directory / f"{step}.corrupt-{stamp}")
        multihost_utils.sync_global_devices("bert_jax_checkpoint_quarantine")
        self._manager.reload()

    def wait_until_finished(self) -> None:
        """Blocks until pending asynchronous saves are on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases Orbax's threads."""
        self._manager.close()

    def __enter__(self) -> "Checkpointer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def save_pytree(path: str, tree: Any, *, force: bool = False) -> None:
    """Saves a pytree of arrays to `path` (Orbax writes a temporary dir, then renames).

    `force` replaces an existing `path`; otherwise an existing one is an error.
    """
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(os.path.abspath(path), tree, force=force)


def load_pytree(path: str, abstract_tree: Any = None) -> Any:
    """Loads a pytree saved by `save_pytree`.

    With `abstract_tree` (ShapeDtypeStructs with shardings) arrays land with
    those shapes, dtypes and shardings; without, as saved, on the default device.
    """
    with ocp.StandardCheckpointer() as checkpointer:
        return checkpointer.restore(os.path.abspath(path), abstract_tree)
