"""Pretrain BERT (masked LM + next sentence) on TFRecords.

    python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir /tmp/bert_tiny
    python -m bert_jax.pretrain --config configs/pretrain.py:base_phase1 --workdir DIR \
        --config.data.train_files='/data/wiki_*.tfrecord' --config.train.batch_size=512

Restarting with the same workdir resumes from the newest complete checkpoint:
parameters, optimizer state, step, RNG and the input pipeline's position, so
the run continues with exactly the batches it would have seen. SIGTERM
(preemption) saves at the next step boundary and exits 0.

The workdir ends up with: checkpoints/, metrics.jsonl, tensorboard/, and
export/ (a bert_jax checkpoint of the final parameters, for fine-tuning).
"""
from __future__ import annotations

import json
import os
import signal
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags, logging
from flax import nnx
from jax.experimental import multihost_utils
from ml_collections import config_flags

from bert_jax import bert_checkpoint, pretrain_config, sharding
from bert_jax.checkpointing import Checkpointer
from bert_jax.flops import (measure_matmul_flops_per_s, peak_flops_per_device,
                            train_flops_per_sequence)
from bert_jax.heads import BertForPreTraining
from bert_jax.metrics_writer import MetricsWriter
from bert_jax.optimizers import make_optimizer
from bert_jax.params import flat_params, load_flat_params
from bert_jax.pretraining_loss import metrics_from_sums
from bert_jax.schedules import make_learning_rate_schedule
from bert_jax.train_step import init_train_state, make_eval_step, make_train_step


class _Preemption:
    """Turns SIGTERM into a flag the loop checks at each step boundary."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def agreed(self) -> bool:
        """Whether any process was asked to stop; every process must call it each step.

        The save after it is collective: if the signal reaches processes at
        different steps, they must still save at the same one.
        """
        if jax.process_count() == 1:
            return self.requested
        flags_ = multihost_utils.process_allgather(np.int32(self.requested))
        return bool(np.max(flags_))

    def _handle(self, signum, frame):
        del signum, frame
        logging.warning("SIGTERM: saving a checkpoint at the next step boundary")
        self.requested = True


def _optimizer(config: ml_collections.ConfigDict):
    t = config.train
    schedule = make_learning_rate_schedule(
        peak_value=t.learning_rate, num_train_steps=t.num_steps, warmup_steps=t.warmup_steps,
        kind=t.schedule, power=t.decay_power)
    optimizer = make_optimizer(t.optimizer, schedule, weight_decay=t.weight_decay, b1=t.adam_b1,
                               b2=t.adam_b2, eps=t.adam_eps,
                               clip_norm=t.max_grad_norm if t.max_grad_norm > 0 else None)
    return optimizer, schedule


def _initial_params(config, model_config, seed: int, shardings):
    """Fresh parameters, or those of train.init_checkpoint (phase 2)."""
    if config.train.init_checkpoint:
        from bert_jax.convert import detect_format, read_checkpoint

        path = config.train.init_checkpoint
        _, flat, report, _ = read_checkpoint(path, detect_format(path))
        for line in report:
            logging.warning("init_checkpoint %s: %s (freshly initialised)", path, line)
        model = BertForPreTraining(model_config, rngs=nnx.Rngs(seed))
        load_flat_params(model, flat, source=path, allow_missing=("mlm_head/", "nsp_head/"))
        params = nnx.to_pure_dict(nnx.state(model, nnx.Param))
        return jax.device_put(params, shardings)

    def init():
        model = BertForPreTraining(model_config, rngs=nnx.Rngs(seed))
        return nnx.to_pure_dict(nnx.state(model, nnx.Param))

    return jax.jit(init, out_shardings=shardings)()


def _peak_flops_per_device() -> float:
    """The device's published bf16 peak; on CPUs, a measured fp32 matmul.

    CPUs have no published peak, so there MFU is relative to the practical
    ceiling of the machine (a 2048^3 matmul, best of 10, about a second).
    """
    device = jax.devices()[0]
    peak = peak_flops_per_device(device.device_kind)
    if peak is None:
        if device.platform != "cpu":
            logging.warning("no known peak FLOP/s for %s; MFU is relative to a measured fp32 "
                            "matmul", device.device_kind)
        peak = measure_matmul_flops_per_s()
    return peak


def _state_of_previous_run(path: str, abstract_state):
    """Params and optimizer moments of another run's newest checkpoint (phase 2).

    The new phase runs its own schedule: the step and the optimizer's counters
    restart from 0, the Adam/LAMB moments carry over. Both runs must use the
    same optimizer (the state's structure must match).
    """
    import optax

    with Checkpointer(path, save_interval_steps=1) as previous:
        restored = previous.restore_latest(abstract_state)
    if restored is None:
        raise FileNotFoundError(f"config.train.init_checkpoint: no checkpoint in {path}/checkpoints")
    _report(f"initialised from step {restored.step} of {path} (params and optimizer state)")
    state = restored.state
    zero = jnp.zeros_like(state["step"])
    state = dict(state, step=zero, opt_state=optax.tree_utils.tree_set(state["opt_state"], count=zero))
    # Copies: the step donates its input, and one buffer may not appear twice.
    return jax.tree.map(jnp.copy, state)


def _state_shardings(optimizer, params_abstract, param_shardings, mesh):
    import optax

    rep = sharding.replicated(mesh)
    opt_abstract = jax.eval_shape(optimizer.init, params_abstract)
    opt_shardings = optax.tree_map_params(
        optimizer, lambda _, s: s, opt_abstract, param_shardings,
        transform_non_params=lambda _: rep)
    return {"step": rep, "params": param_shardings, "opt_state": opt_shardings, "rng": rep}


def _datasets(config, data_files):
    from bert_jax.input_pipeline import make_pretraining_dataset

    d = config.data
    common = dict(global_batch_size=config.train.batch_size, max_seq_length=d.max_seq_length,
                  max_predictions_per_seq=d.max_predictions_per_seq, seed=config.train.seed,
                  dynamic_masking=d.dynamic_masking, masked_lm_prob=d.masked_lm_prob,
                  whole_word_mask=d.whole_word_mask, **data_files["masking"])
    train = make_pretraining_dataset(data_files["train_files"], is_training=True,
                                     shuffle_buffer_size=d.shuffle_buffer, **common)

    def make_eval():
        if not data_files["eval_files"]:
            return None
        ds = make_pretraining_dataset(data_files["eval_files"], is_training=False, **common)
        return ds.take(d.eval_batches) if d.eval_batches else ds

    return train, make_eval


def evaluate(eval_step, params, dataset, batch_sharding) -> dict:
    """Metrics over the eval set: sums over batches, then the ratios."""
    totals = None
    for batch in dataset.as_numpy_iterator():
        sums = eval_step(params, sharding.global_batch(batch, batch_sharding))
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if totals is None:
        return {}
    return {f"eval_{k}": float(v) for k, v in _host(metrics_from_sums(totals)).items()}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs (or resumes) pretraining in `workdir`; returns the last logged metrics."""
    workdir = os.path.abspath(workdir)
    preemption = _Preemption()  # first: set-up (e.g. building the corpus) can take minutes
    data_files = pretrain_config.validate(config, workdir)
    model_config = pretrain_config.model_config(config)
    t = config.train
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
        pretrain_config.save(config, workdir)

    # Mesh and shardings.
    mesh = sharding.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    rules = tuple(tuple(rule) for rule in config.mesh.rules)
    abstract_model = nnx.eval_shape(lambda: BertForPreTraining(model_config, rngs=nnx.Rngs(0)))
    graphdef = nnx.graphdef(abstract_model)
    param_shardings = sharding.param_shardings(abstract_model, mesh, rules)
    batch_sharding = sharding.batch_sharding(mesh, rules)

    # Model and optimizer.
    optimizer, schedule = _optimizer(config)
    params_abstract = nnx.to_pure_dict(nnx.state(abstract_model, nnx.Param))
    state_shardings = _state_shardings(optimizer, params_abstract, param_shardings, mesh)
    train_step = jax.jit(make_train_step(graphdef, optimizer, schedule, t.grad_accum_steps),
                         in_shardings=(state_shardings, batch_sharding),
                         out_shardings=(state_shardings, sharding.replicated(mesh)),
                         donate_argnums=0)
    eval_step = jax.jit(make_eval_step(graphdef),
                        in_shardings=(param_shardings, batch_sharding),
                        out_shardings=sharding.replicated(mesh))

    # Input.
    train_ds, make_eval_ds = _datasets(config, data_files)
    train_iter = train_ds.as_numpy_iterator()

    # State: resume, or start fresh.
    checkpointer = Checkpointer(workdir, save_interval_steps=t.checkpoint_every,
                                max_to_keep=t.keep_checkpoints, keep_period=t.keep_period or None)
    abstract_state = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
        jax.eval_shape(lambda p: init_train_state(p, optimizer, t.seed),
                       params_abstract), state_shardings)
    restored = checkpointer.restore_latest(abstract_state, iterator=train_iter)
    if restored is not None:
        state = restored.state
        _report(f"resumed from the checkpoint at step {restored.step} in {workdir}")
    elif t.init_checkpoint and t.init_mode == "full":
        state = _state_of_previous_run(t.init_checkpoint, abstract_state)
    else:
        params = _initial_params(config, model_config, t.seed, param_shardings)
        state = jax.jit(lambda p: init_train_state(p, optimizer, t.seed),
                        out_shardings=state_shardings)(params)
    step = int(_host(state["step"]))

    writer = MetricsWriter(workdir, resume_step=step, enabled=jax.process_index() == 0)
    flops_per_seq = train_flops_per_sequence(model_config, config.data.max_seq_length,
                                             config.data.max_predictions_per_seq)
    peak = _peak_flops_per_device()
    history, interval_start, interval_step, last = [], time.perf_counter(), step, {}
    first_step = step

    meta = {"config": json.loads(config.to_json_best_effort()), "model": model_config.to_dict()}

    def save(step, force=False):
        # Writes when the interval is reached (or force); the iterator has
        # consumed exactly `step` batches here, so its position matches.
        return checkpointer.save(step, state, iterator=train_iter, meta=meta, force=force)

    while step < t.num_steps:
        batch = sharding.global_batch(next(train_iter), batch_sharding)
        state, metrics = train_step(state, batch)
        step += 1
        history.append(metrics)
        if step == first_step + 1 and step % t.log_every and step != t.num_steps:
            # Leave compilation out of the first interval's throughput.
            jax.block_until_ready(metrics)
            interval_start, interval_step = time.perf_counter(), step
        if not _host(metrics["finite"]):
            checkpointer.wait_until_finished()
            raise FloatingPointError(
                f"non-finite loss or gradient at step {step}; nothing was saved over the last "
                f"good checkpoint (step {checkpointer.latest_step()}) in {workdir}/checkpoints")
        if step % t.log_every == 0 or step == t.num_steps:
            fetched = _host(history)
            seconds = time.perf_counter() - interval_start
            steps_done = step - interval_step
            seqs = steps_done * t.batch_size / seconds
            last = {k: float(np.mean([m[k] for m in fetched]))
                    for k in fetched[0] if k not in ("finite", "learning_rate")}
            last.update(learning_rate=float(fetched[-1]["learning_rate"]),
                        sequences_per_second=seqs,
                        tokens_per_second=seqs * config.data.max_seq_length)
            last["mfu"] = seqs * flops_per_seq / (peak * jax.device_count())
            eta = (t.num_steps - step) * seconds / steps_done
            writer.write(step, last)
            mfu = f" mfu {last['mfu']:.1%}"
            _report(f"step {step}/{t.num_steps} loss {last['loss']:.4f} "
                    f"mlm_acc {last['mlm_accuracy']:.4f} nsp_acc {last['nsp_accuracy']:.4f} "
                    f"lr {last['learning_rate']:.3g} grad_norm {last['grad_norm']:.3f} "
                    f"{seqs:.1f} seq/s {seqs * config.data.max_seq_length:.0f} tok/s{mfu} "
                    f"eta {_duration(eta)}")
            history, interval_start, interval_step = [], time.perf_counter(), step
        if t.eval_every and step % t.eval_every == 0 and step != t.num_steps:
            eval_ds = make_eval_ds()
            if eval_ds is not None:
                result = evaluate(eval_step, state["params"], eval_ds, batch_sharding)
                writer.write(step, result)
                _report(f"eval at step {step}: " + _format(result))
        if step != t.num_steps:
            save(step)
        if preemption.agreed():
            save(step, force=True)
            checkpointer.wait_until_finished()
            _report(f"preempted: checkpoint at step {step} saved; exiting")
            writer.close()
            return last

    save(step, force=True)  # a no-op when this step is already saved
    ran = step > first_step  # False when restarted after the run had finished
    eval_ds = make_eval_ds() if ran else None
    if eval_ds is not None:
        result = evaluate(eval_step, state["params"], eval_ds, batch_sharding)
        writer.write(step, result)
        _report(f"final eval at step {step}: " + _format(result))
        last.update(result)
    checkpointer.wait_until_finished()
    checkpointer.close()
    writer.close()
    if t.export_params and (ran or not os.path.isdir(os.path.join(workdir, "export"))):
        export_params(state["params"], model_config, os.path.join(workdir, "export"),
                      vocab_file=data_files.get("vocab_file"))
    return last


def export_params(params, model_config, path: str, vocab_file: str | None = None) -> None:
    """Writes the parameters as a bert_jax checkpoint (the convert CLI's format)."""
    model = nnx.eval_shape(lambda: BertForPreTraining(model_config, rngs=nnx.Rngs(0)))
    state = nnx.state(model, nnx.Param)
    # Every process takes part in gathering sharded parameters; one writes.
    nnx.replace_by_pure_dict(state, multihost_utils.process_allgather(params, tiled=True))
    if jax.process_index() != 0:
        return
    nnx.update(model, state)
    bert_checkpoint.save(path, model_config, flat_params(model), vocab_file=vocab_file,
                         overwrite=True)
    _report(f"exported parameters to {path}")


def _report(line: str) -> None:
    # Progress goes to stdout, unfiltered, from the first process; absl logging
    # is kept for warnings (libraries such as Orbax log every save at INFO).
    if jax.process_index() == 0:
        print(line, flush=True)


def _host(tree):
    """numpy values of replicated arrays (also when they span several processes)."""
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)


def _format(metrics: dict) -> str:
    return " ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"


FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/pretrain.py:tiny.",
                                lock_config=True)
flags.DEFINE_string("workdir", None, "Checkpoints, metrics and the export go here.")
flags.DEFINE_bool("distributed", False, "Join a multi-process JAX job (jax.distributed): with "
                  "the three flags below, or detected from SLURM / TPU VM environments.")
flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
flags.DEFINE_integer("num_processes", None, "Processes in the job.")
flags.DEFINE_integer("process_id", None, "This process's index.")


def main(argv):
    del argv
    if FLAGS.config is None or not FLAGS.workdir:
        raise app.UsageError("--config and --workdir are required")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    if FLAGS.distributed or FLAGS.coordinator_address:
        # Before anything touches a device. Unset flags are auto-detected.
        jax.distributed.initialize(coordinator_address=FLAGS.coordinator_address,
                                   num_processes=FLAGS.num_processes,
                                   process_id=FLAGS.process_id)
    train_and_evaluate(FLAGS.config, FLAGS.workdir)


if __name__ == "__main__":
    app.run(main)
