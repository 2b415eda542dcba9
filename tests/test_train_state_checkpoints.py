"""Train-state checkpoints: rotation, exact restore, corruption fallback, iterator position."""
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow as tf
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from bert_jax.checkpoints import train_state


def _state(step: int) -> dict:
    """A train-state-like pytree whose values depend on `step`."""
    key = jax.random.fold_in(jax.random.key(0), step)
    return {
        "step": jnp.int32(step),
        "params": {
            "dense": {
                "kernel": jax.random.normal(key, (4, 8)),
                "bias": jnp.full((8,), step, jnp.float32),
            },
            "embedding": jax.random.normal(key, (16, 4), jnp.bfloat16),
        },
        "opt_state": {"count": jnp.int32(step), "mu": jnp.arange(4, dtype=jnp.float32) * step},
        "rng": jax.random.key_data(key),
    }


def _bits(x):
    return np.atleast_1d(x).view(np.uint8)


def _assert_bit_exact(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(_bits(x), _bits(y))


def _save_steps(workdir, steps, **kwargs):
    with train_state.Checkpointer(workdir, save_interval_steps=1, **kwargs) as ckpt:
        for step in steps:
            assert ckpt.save(step, _state(step), meta={"config": {"lr": 1e-4}, "step": step})


def test_rotation_keeps_the_newest_and_restores_bit_exact(tmp_path):
    _save_steps(tmp_path, range(1, 6), max_to_keep=2)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["4", "5"]
    abstract = train_state.abstract_like(_state(0))
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        restored = ckpt.restore_latest(abstract)
    assert restored.step == 5
    assert restored.meta == {"config": {"lr": 1e-4}, "step": 5}
    _assert_bit_exact(restored.state, _state(5))


def test_keep_period_keeps_multiples_forever(tmp_path):
    _save_steps(tmp_path, range(1, 8), max_to_keep=2, keep_period=3)
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        assert ckpt.all_steps() == [3, 6, 7]


def test_saves_on_the_interval_or_when_forced_once(tmp_path):
    with train_state.Checkpointer(tmp_path, save_interval_steps=3) as ckpt:
        saved = [step for step in range(1, 8) if ckpt.save(step, _state(step))]
        assert ckpt.save(7, _state(7), force=True)  # the final step, off the interval
        assert not ckpt.save(7, _state(7), force=True)  # already there: no error, no rewrite
        ckpt.wait_until_finished()
        assert saved == [3, 6] and ckpt.all_steps() == [3, 6, 7]


def test_no_checkpoint_restores_none(tmp_path):
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        assert ckpt.restore_latest(train_state.abstract_like(_state(0))) is None


def _truncate_data_files(step_dir):
    data = step_dir / "state" / "d"
    assert os.listdir(data), "expected Orbax's OCDBT data files here"
    for name in os.listdir(data):
        with open(data / name, "r+b") as f:
            f.truncate(8)


@pytest.mark.parametrize(
    "damage",
    [
        _truncate_data_files,
        lambda step_dir: os.remove(step_dir / "state" / "manifest.ocdbt"),
        lambda step_dir: open(step_dir / "meta" / "metadata", "w").close(),  # empty JSON
    ],
    ids=["truncated-data", "deleted-manifest", "empty-meta"],
)
# TensorStore reports a failed read once more from a callback after Orbax's
# event loop has closed; that noise is not ours.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, caplog, damage):
    _save_steps(tmp_path, [1, 2, 3], max_to_keep=3)
    damage(tmp_path / "checkpoints" / "3")
    caplog.set_level(logging.WARNING)
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        restored = ckpt.restore_latest(train_state.abstract_like(_state(0)))
        assert restored.step == 2
        _assert_bit_exact(restored.state, _state(2))
        messages = [r.getMessage() for r in caplog.records]
        assert any("step 3" in m and "cannot be restored" in m for m in messages)
        # The bad step is moved aside, so training can write step 3 again.
        assert ckpt.all_steps() == [1, 2]
        assert ckpt.save(3, _state(3))
    names = os.listdir(tmp_path / "checkpoints")
    assert "3" in names and any(n.startswith("3.corrupt-") for n in names)


def test_unreadable_everything_raises(tmp_path):
    _save_steps(tmp_path, [1], max_to_keep=3)
    wrong = train_state.abstract_like({"something": jnp.zeros(3)})
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        with pytest.raises(RuntimeError, match="none of the checkpoints"):
            ckpt.restore_latest(wrong)
        assert ckpt.all_steps() == [1]  # nothing was moved aside


def test_half_written_step_is_not_a_checkpoint(tmp_path):
    _save_steps(tmp_path, [1, 2], max_to_keep=3)
    # What Orbax leaves when a process dies mid-save: the step under its temporary name.
    partial = tmp_path / "checkpoints" / "3.orbax-checkpoint-tmp-1700000000000000"
    (partial / "state").mkdir(parents=True)
    (partial / "state" / "_METADATA").write_text("{")
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        assert ckpt.latest_step() == 2
        assert ckpt.restore_latest(train_state.abstract_like(_state(0))).step == 2
    assert not partial.exists()  # cleaned up on start


def test_restore_places_arrays_with_the_target_sharding(tmp_path):
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, PartitionSpec())
    by_rows = NamedSharding(mesh, PartitionSpec("data"))
    state = {"kernel": jax.device_put(jnp.arange(8.0 * len(jax.devices())).reshape(-1, 2), by_rows),
             "step": jax.device_put(jnp.int32(7), replicated)}
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        ckpt.save(7, state)
        ckpt.wait_until_finished()
        restored = ckpt.restore_latest(train_state.abstract_like(state))
    assert restored.state["kernel"].sharding == by_rows
    assert restored.state["step"].sharding == replicated
    _assert_bit_exact(restored.state, state)


def test_iterator_position_is_restored(tmp_path):
    dataset = tf.data.Dataset.range(100).shuffle(10, seed=1).batch(3)
    iterator = dataset.as_numpy_iterator()
    [next(iterator) for _ in range(4)]
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        ckpt.save(4, _state(4), iterator=iterator)
    expected = [next(iterator) for _ in range(5)]

    fresh = dataset.as_numpy_iterator()
    with train_state.Checkpointer(tmp_path, save_interval_steps=1) as ckpt:
        assert ckpt.restore_latest(train_state.abstract_like(_state(0)), iterator=fresh).step == 4
    np.testing.assert_array_equal([next(fresh) for _ in range(5)], expected)
    files = os.listdir(tmp_path / "checkpoints" / "4" / "data")
    assert "process_0-of-1.index" in files


def test_save_and_load_pytree(tmp_path):
    tree = _state(3)["params"]
    path = tmp_path / "export" / "params"
    train_state.save_pytree(path, tree)
    assert sorted(os.listdir(tmp_path / "export")) == ["params"]  # no temporary left behind
    _assert_bit_exact(train_state.load_pytree(path), tree)
    _assert_bit_exact(train_state.load_pytree(path, train_state.abstract_like(tree)), tree)
    with pytest.raises(Exception, match="exists"):
        train_state.save_pytree(path, tree)
    train_state.save_pytree(path, _state(4)["params"], force=True)
    _assert_bit_exact(train_state.load_pytree(path), _state(4)["params"])
