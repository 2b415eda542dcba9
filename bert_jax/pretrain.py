"""Pretrain BERT (masked LM + next sentence) on TFRecords.

    python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir /tmp/bert_tiny
    python -m bert_jax.pretrain --config configs/pretrain.py:base_phase1 --workdir DIR \
        --config.data.train_files='/data/wiki_*.tfrecord' --config.train.batch_size=512

Restarting with the same workdir resumes from the newest complete checkpoint:
parameters, optimizer state, step, RNG and the input pipeline's position, so
the run continues with exactly the batches it would have seen. SIGTERM
(preemption) saves at the next step boundary and exits 0.

The workdir ends up with: checkpoints/, metrics.jsonl, tensorboard/,
config.json, and export/ (a bert_jax checkpoint of the final parameters, for
fine-tuning).
"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import optax
from absl import logging
from flax import nnx

from bert_jax.checkpoints import Checkpointer, load_flat_params, read_checkpoint
from bert_jax.model import BertForPreTraining
from bert_jax.pretraining import config_check, input_pipeline
from bert_jax.pretraining.loss import metrics_from_sums
from bert_jax.pretraining.step import make_eval_step, make_train_step
from bert_jax.training import entry, loop, mesh
from bert_jax.training.export import export_params
from bert_jax.training.flops import peak_flops_for_mfu, train_flops_per_sequence
from bert_jax.training.metrics_writer import MetricsWriter
from bert_jax.training.optimizers import optimizer_and_schedule
from bert_jax.training.preemption import Preemption
from bert_jax.training.reporting import host_values, report
from bert_jax.training.run_config import save_config
from bert_jax.training.state import (
    abstract_train_state,
    new_train_state,
    shard_model,
    state_shardings,
)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict:
    """Runs (or resumes) pretraining in `workdir`; returns the last logged metrics."""
    workdir = os.path.abspath(workdir)
    preemption = Preemption()  # first: set-up (e.g. building the corpus) can take minutes
    data_files = config_check.validate(config, workdir)
    model_config = config_check.model_config(config)
    t, d = config.train, config.data
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
        save_config(config, workdir)

    def make_model(seed: int = t.seed) -> BertForPreTraining:
        return BertForPreTraining(model_config, rngs=nnx.Rngs(seed))

    # 1. Mesh and shardings: parameters by their logical axis names.
    sharded = shard_model(make_model, config.mesh)
    graphdef, abstract_params = sharded.graphdef, sharded.abstract_params
    param_shardings, batch_sharding = sharded.param_shardings, sharded.batch_sharding

    # 2. Optimizer, state shardings, and the jitted steps.
    optimizer, schedule = optimizer_and_schedule(
        t.optimizer, learning_rate=t.learning_rate, num_steps=t.num_steps,
        warmup_steps=t.warmup_steps, schedule=t.schedule, decay_power=t.decay_power,
        weight_decay=t.weight_decay, b1=t.adam_b1, b2=t.adam_b2, eps=t.adam_eps,
        max_grad_norm=t.max_grad_norm)
    shardings = state_shardings(optimizer, abstract_params, param_shardings, sharded.mesh)
    train_step = jax.jit(make_train_step(graphdef, optimizer, schedule, t.grad_accum_steps),
                         in_shardings=(shardings, batch_sharding),
                         out_shardings=(shardings, sharded.replicated),
                         donate_argnums=0)
    eval_step = jax.jit(make_eval_step(graphdef), in_shardings=(param_shardings, batch_sharding),
                        out_shardings=sharded.replicated)

    # 3. Input: this host's share of the files, batches of global_batch / processes.
    common = dict(global_batch_size=t.batch_size, max_seq_length=d.max_seq_length,
                  max_predictions_per_seq=d.max_predictions_per_seq, seed=t.seed,
                  dynamic_masking=d.dynamic_masking, masked_lm_prob=d.masked_lm_prob,
                  whole_word_mask=d.whole_word_mask, **data_files["masking"])
    train_iter = input_pipeline.make_pretraining_dataset(
        data_files["train_files"], is_training=True, shuffle_buffer_size=d.shuffle_buffer,
        **common).as_numpy_iterator()

    def evaluate(state, step) -> dict:
        del step
        if not data_files["eval_files"]:
            return {}
        ds = input_pipeline.make_pretraining_dataset(data_files["eval_files"],
                                                     is_training=False, **common)
        ds = ds.take(d.eval_batches) if d.eval_batches else ds
        totals = None
        for batch in ds.as_numpy_iterator():
            sums = eval_step(state["params"], mesh.global_batch(batch, batch_sharding))
            totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
        if totals is None:
            return {}
        return {f"eval_{k}": float(v) for k, v in host_values(metrics_from_sums(totals)).items()}

    # 4. State: resume from this workdir, or start (fresh, or from init_checkpoint).
    checkpointer = Checkpointer(workdir, save_interval_steps=t.checkpoint_every,
                                max_to_keep=t.keep_checkpoints, keep_period=t.keep_period or None)
    abstract_state = abstract_train_state(optimizer, abstract_params, shardings, t.seed)
    restored = checkpointer.restore_latest(abstract_state, iterator=train_iter)
    if restored is not None:
        state = restored.state
        report(f"resumed from the checkpoint at step {restored.step} in {workdir}")
    elif t.init_checkpoint and t.init_mode == "full":
        state = _state_of_previous_run(t.init_checkpoint, abstract_state)
    elif t.init_checkpoint:
        state = new_train_state(make_model, optimizer, t.seed, shardings,
                                load_params=lambda model: _load_init_checkpoint(model, t))
    else:
        state = new_train_state(make_model, optimizer, t.seed, shardings)
    step = int(host_values(state["step"]))

    # 5. The loop: steps, logging, evaluation, checkpoints, preemption.
    settings = loop.LoopSettings(
        num_steps=t.num_steps, log_every=t.log_every, eval_every=t.eval_every,
        examples_per_step=t.batch_size, tokens_per_example=d.max_seq_length,
        flops_per_example=train_flops_per_sequence(model_config, d.max_seq_length,
                                                   d.max_predictions_per_seq),
        peak_flops=peak_flops_for_mfu() * jax.device_count(),
        log_labels=(("mlm_accuracy", "mlm_acc"), ("nsp_accuracy", "nsp_acc")))
    writer = MetricsWriter(workdir, resume_step=step, enabled=jax.process_index() == 0)
    meta = {"config": json.loads(config.to_json_best_effort()), "model": model_config.to_dict()}
    batches = (mesh.global_batch(b, batch_sharding) for b in train_iter)
    result = loop.train(state, train_step, batches, step=step, settings=settings,
                        checkpointer=checkpointer, writer=writer, preemption=preemption,
                        evaluate=evaluate, save_extras={"iterator": train_iter, "meta": meta})
    checkpointer.close()
    writer.close()

    # 6. Export the parameters for fine-tuning (once, at the end).
    export_dir = os.path.join(workdir, "export")
    if (not result.preempted and t.export_params
            and (result.trained or not os.path.isdir(export_dir))):
        if export_params(result.state["params"], model_config, make_model, export_dir,
                         vocab_file=data_files.get("vocab_file"),
                         do_lower_case=d.do_lower_case):
            report(f"exported parameters to {export_dir}")
    return result.last_metrics


def _load_init_checkpoint(model: BertForPreTraining, t: ml_collections.ConfigDict) -> None:
    """Phase 2 from any checkpoint: its encoder (and heads, when it has them)."""
    read = read_checkpoint(t.init_checkpoint)
    for line in read.missing:
        logging.warning("init_checkpoint %s: %s (freshly initialised)", t.init_checkpoint, line)
    load_flat_params(model, read.params, source=t.init_checkpoint,
                     allow_missing=("mlm_head/", "nsp_head/"))


def _state_of_previous_run(path: str, abstract_state):
    """Params and optimizer moments of another run's newest checkpoint (phase 2).

    The new phase runs its own schedule: the step and the optimizer's counters
    restart from 0, the Adam/LAMB moments carry over. Both runs must use the
    same optimizer (the state's structure must match).
    """
    with Checkpointer(path, save_interval_steps=1) as previous:
        restored = previous.restore_latest(abstract_state)
    if restored is None:
        raise FileNotFoundError(f"config.train.init_checkpoint: no checkpoint in "
                                f"{path}/checkpoints")
    report(f"initialised from step {restored.step} of {path} (params and optimizer state)")
    state = restored.state
    zero = jnp.zeros_like(state["step"])
    opt_state = optax.tree_utils.tree_set(state["opt_state"], count=zero)
    state = dict(state, step=zero, opt_state=opt_state)
    # Copies: the step donates its input, and one buffer may not appear twice.
    return jax.tree.map(jnp.copy, state)


if __name__ == "__main__":
    entry.run(train_and_evaluate, "configs/pretrain.py:tiny")
