"""The fine-tuning trainer every task shares: checkpoint in, epochs of batches, evaluations,
the best checkpoint out, predictions.

A task describes itself with a `FineTuneSpec` (its model, its loss, its
features and how it scores predictions); `run` does the rest with the same
pieces as pretraining: the mesh and sharding rules, the optimizer from the
config, the jitted pure step, the shared loop (logging, checkpoints, SIGTERM,
NaN stop), metrics.jsonl and TensorBoard.

Data are in memory (fine-tuning sets are small): every process holds every
feature and computes the same global batches; each feeds its own rows. The
example order is a fresh seeded permutation per epoch and batches run across
epoch boundaries (google-research/bert's run_classifier: num_train_steps =
examples * epochs / batch), so the input position is a function of the step:
a resumed run sees exactly the batches it would have seen, with no iterator
state. Batches are padded to the smallest of `length_buckets` that holds
their longest row (a few compiled shapes, no padding to 128 for short
sentences).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable

import jax
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import nnx

from bert_jax.checkpoints import Checkpointer, bert_jax_folder, load_flat_params, read_checkpoint
from bert_jax.checkpoints.flat_params import TaskHead
from bert_jax.fileio.atomic_output import atomic_file
from bert_jax.model.config import BertConfig
from bert_jax.training import loop, mesh
from bert_jax.training.export import export_params
from bert_jax.training.flops import encoder_train_flops_per_sequence, peak_flops_for_mfu
from bert_jax.training.metrics_writer import MetricsWriter, read_metrics
from bert_jax.training.optimizers import optimizer_and_schedule
from bert_jax.training.preemption import Preemption
from bert_jax.training.reporting import host_values, report
from bert_jax.training.run_config import save_config
from bert_jax.training.state import (
    abstract_train_state,
    new_train_state,
    pure_params,
    shard_model,
    state_shardings,
)
from bert_jax.training.updates import apply_gradients, dropout_key

BEST_DIR = "best"
RESULTS_FILE = "eval_results.json"


@dataclasses.dataclass
class FineTuneSpec:
    """What a task tells the shared trainer."""

    model_config: BertConfig
    make_model: Callable[[BertConfig, nnx.Rngs], nnx.Module]  # the task model, head included
    head_prefixes: tuple[str, ...]  # parameter paths that start fresh ("classifier/")
    model_inputs: Callable[[dict], dict]  # batch -> the model's keyword arguments
    # (model outputs, batch) -> (mean loss, {name: scalar}); traced inside the step.
    loss: Callable[[Any, dict], tuple[jax.Array, dict]]
    train_features: dict[str, np.ndarray]  # equal first axes; "length" drives bucketing
    # predict(features) -> model outputs as numpy, in the features' order; returns
    # {metric: value in percent} for every evaluation split.
    evaluate: Callable[[Callable[[dict], Any]], dict]
    main_metric: str  # a key of evaluate's result; higher is better
    vocab_file: str | None = None  # stored with exported checkpoints
    do_lower_case: bool | None = None  # likewise (tokenizer_config.json)
    head: TaskHead | None = None  # the exported head's architecture and labels (task.json)
    task_name: str = ""  # in task.json and eval_results.json


@dataclasses.dataclass
class FineTuneResult:
    """What `run` leaves behind (also in WORKDIR/eval_results.json)."""

    best_metrics: dict  # evaluation of the best checkpoint
    final_metrics: dict  # evaluation at the end of training
    best_params: Any  # the best parameters, on the devices
    predict: Callable[[dict], Any]  # predict(features) with the best parameters


def num_train_steps(num_examples: int, batch_size: int, num_epochs: float) -> int:
    """run_classifier's int(num_examples / batch * epochs), at least one."""
    return max(1, int(num_examples / batch_size * num_epochs))


def length_bucket(length: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds `length` tokens."""
    for bucket in buckets:
        if length <= bucket:
            return bucket
    raise ValueError(f"a row of {length} tokens exceeds the largest length bucket {buckets[-1]}")


def buckets_for(max_seq_length: int, buckets) -> tuple[int, ...]:
    """The configured buckets, capped at (and always including) max_seq_length."""
    kept = sorted({int(b) for b in buckets if 0 < int(b) < max_seq_length})
    return (*kept, max_seq_length)


def epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The example order of `epoch`: a permutation drawn from (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(num_examples)


def train_batch_indices(step: int, batch_size: int, num_examples: int, seed: int) -> np.ndarray:
    """The global batch of step `step` (0-based): positions step*B .. step*B+B-1 of the stream."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    epochs = positions // num_examples
    out = np.empty(batch_size, np.int64)
    for epoch in np.unique(epochs):
        mask = epochs == epoch
        out[mask] = epoch_order(num_examples, seed, int(epoch))[positions[mask] % num_examples]
    return out


def take_rows(features: dict, rows: np.ndarray, length: int) -> dict:
    """Rows of every feature, sequence features cut to `length` columns."""
    return {k: (v[rows, :length] if v.ndim >= 2 and k != "length" else v[rows])
            for k, v in features.items()}


def _local_rows(global_rows: np.ndarray) -> np.ndarray:
    """This process's share of a global batch (contiguous rows, as global_batch expects)."""
    local = len(global_rows) // jax.process_count()
    start = jax.process_index() * local
    return global_rows[start:start + local]


def _padded_rows(rows: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """`rows` padded to `size` with copies of its first row, and weights 1 real / 0 padding."""
    pad = size - len(rows)
    weights = np.concatenate([np.ones(len(rows), np.float32), np.zeros(pad, np.float32)])
    return np.concatenate([rows, np.repeat(rows[:1], pad)]), weights


def load_pretrained(spec: FineTuneSpec, init_checkpoint: str, seed: int):
    """`make_model` with the checkpoint's weights: everything but the head must be there."""
    def load(model):
        if not init_checkpoint:
            return
        read = read_checkpoint(init_checkpoint)
        unused = load_flat_params(model, read.params, source=init_checkpoint,
                                  allow_missing=spec.head_prefixes)
        heads = sorted({name.split("/")[0] for name in unused})
        if heads:
            logging.info("init_checkpoint %s: not used here: %s", init_checkpoint, heads)
    return load


def run(spec: FineTuneSpec, config: ml_collections.ConfigDict, workdir: str,
        preemption: Preemption) -> FineTuneResult:
    """Fine-tunes (or resumes) in `workdir` and evaluates; see the module docstring.

    `config` carries run_classifier's fields (train_batch_size,
    eval_batch_size, learning_rate, num_train_epochs, warmup_proportion,
    seed, max_seq_length, init_checkpoint), the optimizer's, the loop's
    (log_every, checkpoint_every, keep_checkpoints), length_buckets,
    freeze_encoder and mesh.
    """
    c = config
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() == 0:
        save_config(c, workdir)
    num_examples = len(spec.train_features["input_ids"])
    steps = num_train_steps(num_examples, c.train_batch_size, c.num_train_epochs)
    steps_per_epoch = max(1, num_examples // c.train_batch_size)
    buckets = buckets_for(c.max_seq_length, c.length_buckets)

    def make_model(seed: int = c.seed):
        return spec.make_model(spec.model_config, nnx.Rngs(seed))

    # Mesh, optimizer, state shardings, jitted steps.
    sharded = shard_model(make_model, c.mesh)
    graphdef, abstract_params = sharded.graphdef, sharded.abstract_params
    param_shardings, batch_sharding = sharded.param_shardings, sharded.batch_sharding
    replicated = sharded.replicated
    optimizer, schedule = optimizer_and_schedule(
        c.optimizer, learning_rate=c.learning_rate, num_steps=steps,
        warmup_steps=int(steps * c.warmup_proportion), schedule="bert",
        weight_decay=c.weight_decay, b1=c.adam_b1, b2=c.adam_b2, eps=c.adam_eps,
        max_grad_norm=c.max_grad_norm)
    if c.freeze_encoder:
        optimizer = _frozen_encoder(optimizer, abstract_params)
    shardings = state_shardings(optimizer, abstract_params, param_shardings, sharded.mesh)

    def train_step(state, batch):
        key = dropout_key(state)

        def loss_of(params):
            model = nnx.merge(graphdef, params)
            outputs = model(**spec.model_inputs(batch), deterministic=False,
                            rngs=nnx.Rngs(dropout=key))
            return spec.loss(outputs, batch)

        (loss, metrics), grads = jax.value_and_grad(loss_of, has_aux=True)(state["params"])
        return apply_gradients(state, grads, optimizer, schedule, dict(metrics, loss=loss))

    def predict_step(params, batch):
        model = nnx.merge(graphdef, params)
        return model(**spec.model_inputs(batch), deterministic=True)

    train_step = jax.jit(train_step, in_shardings=(shardings, batch_sharding),
                         out_shardings=(shardings, replicated), donate_argnums=0)
    predict_step = jax.jit(predict_step, in_shardings=(param_shardings, batch_sharding),
                           out_shardings=replicated)

    def predict_with(params) -> Callable[[dict], Any]:
        def predict(features: dict) -> Any:
            """Model outputs for every row of `features`, in their order (host numpy)."""
            n = len(features["input_ids"])
            order = np.argsort(features["length"], kind="stable")  # similar lengths together
            batch_size = c.eval_batch_size
            chunks = []
            for start in range(0, n, batch_size):
                rows, _ = _padded_rows(order[start:start + batch_size], batch_size)
                length = length_bucket(int(features["length"][rows].max()), buckets)
                local = take_rows(features, _local_rows(rows), length)
                out = predict_step(params, mesh.global_batch(local, batch_sharding))
                real = min(batch_size, n - start)
                chunks.append(jax.tree.map(lambda x: np.asarray(x)[:real], host_values(out)))
            outputs = jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)
            inverse = np.empty(n, np.int64)
            inverse[order] = np.arange(n)
            return jax.tree.map(lambda x: x[inverse], outputs)
        return predict

    # Batches: a function of the step, so resuming needs no iterator state.
    def batches(first_step: int):
        for step in range(first_step, steps):
            rows = train_batch_indices(step, c.train_batch_size, num_examples, c.seed)
            length = length_bucket(int(spec.train_features["length"][rows].max()), buckets)
            yield mesh.global_batch(take_rows(spec.train_features, _local_rows(rows), length),
                                    batch_sharding)

    # State: resume, or the pretrained encoder with a fresh head.
    checkpointer = Checkpointer(workdir, save_interval_steps=c.checkpoint_every or steps_per_epoch,
                                max_to_keep=c.keep_checkpoints)
    abstract_state = abstract_train_state(optimizer, abstract_params, shardings, c.seed)
    restored = checkpointer.restore_latest(abstract_state)
    if restored is not None:
        state = restored.state
        report(f"resumed from the checkpoint at step {restored.step} in {workdir}")
    else:
        state = new_train_state(make_model, optimizer, c.seed, shardings,
                                load_params=load_pretrained(spec, c.init_checkpoint, c.seed))
    step = int(host_values(state["step"]))

    best_dir = os.path.join(workdir, BEST_DIR)
    best = {"metrics": _read_json(os.path.join(best_dir, RESULTS_FILE))}

    def evaluate(state, at_step) -> dict:
        metrics = spec.evaluate(predict_with(state["params"]))
        metrics = {f"eval_{k}": v for k, v in metrics.items()}
        key = f"eval_{spec.main_metric}"
        previous = best["metrics"].get(key)
        if previous is None or metrics[key] > previous:
            best["metrics"] = dict(metrics, step=at_step)
            written = export_params(state["params"], spec.model_config, make_model, best_dir,
                                    vocab_file=spec.vocab_file, do_lower_case=spec.do_lower_case,
                                    task=spec.head, task_meta={"task": spec.task_name})
            if written:
                _write_json(os.path.join(best_dir, RESULTS_FILE), best["metrics"])
        return metrics

    # Throughput counts real tokens (padding excluded), and MFU their useful FLOPs.
    mean_length = float(np.mean(spec.train_features["length"]))
    settings = loop.LoopSettings(
        num_steps=steps, log_every=c.log_every, eval_every=steps_per_epoch,
        examples_per_step=c.train_batch_size, tokens_per_example=mean_length,
        flops_per_example=encoder_train_flops_per_sequence(spec.model_config, mean_length),
        peak_flops=peak_flops_for_mfu() * jax.device_count(),
        log_labels=(("accuracy", "acc"),), progress_bar=c.progress_bar)
    writer = MetricsWriter(workdir, resume_step=step, enabled=jax.process_index() == 0)
    result = loop.train(state, train_step, batches(step), step=step, settings=settings,
                        checkpointer=checkpointer, writer=writer, preemption=preemption,
                        evaluate=evaluate)
    checkpointer.close()
    writer.close()
    if result.preempted:
        raise SystemExit(0)

    final = {k: v for k, v in result.last_metrics.items() if k.startswith("eval_")}
    if not final:  # restarted after the end: evaluate the final state again
        final = {f"eval_{k}": v
                 for k, v in spec.evaluate(predict_with(result.state["params"])).items()}
    best_params = result.state["params"]
    if best["metrics"].get("step") != step and os.path.isdir(best_dir):
        best_params = _load_best(best_dir, make_model, param_shardings)
    examples_per_second = [r.get("sequences_per_second") for r in read_metrics(workdir)]
    summary = {"task": spec.task_name, "main_metric": spec.main_metric,
               **{k: v for k, v in best["metrics"].items() if k != "step"},
               "best_step": best["metrics"].get("step"), "num_train_steps": steps,
               "num_train_examples": num_examples,
               "train_examples_per_second": _mean([x for x in examples_per_second if x]),
               "final": final}
    if jax.process_index() == 0:
        _write_json(os.path.join(workdir, RESULTS_FILE), summary)
    report(f"best at step {summary['best_step']}: " + " ".join(
        f"{k} {v:.2f}" for k, v in best["metrics"].items() if k.startswith("eval_")))
    return FineTuneResult(best["metrics"], final, best_params, predict_with(best_params))


def read_results(workdir: str) -> dict:
    """WORKDIR/eval_results.json, as `run` wrote it."""
    return _read_json(os.path.join(workdir, RESULTS_FILE))


def _frozen_encoder(optimizer: optax.GradientTransformation, abstract_params: dict):
    """Updates only the task head; the encoder (`bert/`) stays as loaded."""
    labels = {name: ("frozen" if name == "bert" else "trained") for name in abstract_params}
    return optax.multi_transform({"trained": optimizer, "frozen": optax.set_to_zero()},
                                 lambda params: {k: jax.tree.map(lambda _: labels[k], v)
                                                 for k, v in params.items()})


def _load_best(best_dir: str, make_model, param_shardings):
    model = nnx.eval_shape(make_model)
    load_flat_params(model, bert_jax_folder.load(best_dir).params, source=best_dir)
    return jax.device_put(pure_params(model), param_shardings)


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def _write_json(path: str, value: dict) -> None:
    with atomic_file(path, overwrite=True) as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.write("\n")

