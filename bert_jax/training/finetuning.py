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
import math
import os
from typing import Any, Callable

import jax
import ml_collections
import numpy as np
import optax
from absl import logging
from flax import nnx

from bert_jax.checkpoints import Checkpointer, load_flat_params, read_checkpoint
from bert_jax.checkpoints.flat_params import CheckpointData, TaskHead
from bert_jax.fileio.atomic_output import atomic_file
from bert_jax.model.config import BertConfig
from bert_jax.tokenization import FullTokenizer, load_vocab
from bert_jax.training import loop, mesh
from bert_jax.training.export import export_params
from bert_jax.training.flops import encoder_train_flops_per_sequence, peak_flops_for_mfu
from bert_jax.training.metrics_writer import MetricsWriter, read_metrics
from bert_jax.training.optimizers import make_optimizer
from bert_jax.training.packing import pack_batch
from bert_jax.training.preemption import Preemption
from bert_jax.training.reporting import host_values, report
from bert_jax.training.run_config import fail, save_config
from bert_jax.training.schedules import make_learning_rate_schedule
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
    # The init checkpoint's flat weights, as the task already read them (read once).
    init_params: dict[str, np.ndarray] | None = None
    vocab_file: str | None = None  # stored with exported checkpoints
    do_lower_case: bool | None = None  # likewise (tokenizer_config.json)
    head: TaskHead | None = None  # the exported head's architecture and labels (task.json)
    task_name: str = ""  # in task.json and eval_results.json
    # Whether training batches may be packed (training.packing): model_inputs
    # then also receives position_ids, example_ids and cls_index.
    packable: bool = False


@dataclasses.dataclass
class FineTuneResult:
    """What `run` leaves behind (also in WORKDIR/eval_results.json)."""

    best_metrics: dict  # evaluation of the best checkpoint
    final_metrics: dict  # evaluation at the end of training
    best_params: Any  # the best parameters, on the devices
    predict: Callable[[dict], Any]  # predict(features) with the best parameters
    compiled: CompiledSteps  # pass to the next run of a sweep
    preempted: bool = False  # SIGTERM: saved and stopped early; nothing else is set


@dataclasses.dataclass(frozen=True)
class CompiledSteps:
    """The jitted train and predict steps, reusable by runs with the same `key`."""

    key: tuple
    train_step: AheadOfTime  # (state, batch, learning_rate) -> (state, metrics)
    predict_step: Callable  # (params, batch) -> model outputs


class AheadOfTime:
    """A jitted step compiled once per batch shape, ahead of the loop when asked.

    Compiling every length bucket before training keeps compilation out of the
    measured throughput; calls dispatch on the batch's shapes.
    """

    def __init__(self, jitted: Callable, abstract_state: Any):
        self._jitted = jitted
        self._abstract_state = abstract_state
        self._executables: dict = {}

    def _key(self, batch: dict) -> tuple:
        return tuple(sorted((k, v.shape, str(v.dtype)) for k, v in batch.items()))

    def compile(self, batch: dict, learning_rate) -> None:
        """Compiles for `batch`'s shapes (arrays or ShapeDtypeStructs with shardings)."""
        key = self._key(batch)
        if key not in self._executables:
            self._executables[key] = self._jitted.lower(
                self._abstract_state, batch, learning_rate).compile()

    def __call__(self, state, batch: dict, learning_rate):
        self.compile(batch, learning_rate)
        return self._executables[self._key(batch)](state, batch, learning_rate)


def checkpoint_tokenizer(config: ml_collections.ConfigDict,
                         checkpoint: CheckpointData) -> FullTokenizer:
    """The tokenizer a checkpoint was trained with; config.vocab_file/do_lower_case override.

    The vocabulary must have the model's vocab_size (both numbers in the error).
    do_lower_case: the config's if set, else the checkpoint's tokenizer_config.json,
    else True (uncased, BERT's default); a config that contradicts the checkpoint
    is warned about.
    """
    vocab_file = config.vocab_file or checkpoint.vocab_file
    if not vocab_file:
        fail("vocab_file", f"{config.init_checkpoint} has no vocab.txt; set config.vocab_file")
    size = len(load_vocab(vocab_file))
    if size != checkpoint.config.vocab_size:
        fail("vocab_file", f"{vocab_file} has {size} tokens but the checkpoint's model has "
             f"vocab_size {checkpoint.config.vocab_size}")
    do_lower_case = config.do_lower_case
    if do_lower_case is None:
        do_lower_case = True if checkpoint.do_lower_case is None else checkpoint.do_lower_case
    elif checkpoint.do_lower_case not in (None, do_lower_case):
        logging.warning("config.do_lower_case=%s but %s was trained with do_lower_case=%s",
                        do_lower_case, config.init_checkpoint, checkpoint.do_lower_case)
    return FullTokenizer(vocab_file, do_lower_case=do_lower_case)


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


def _local_part(global_rows: np.ndarray) -> np.ndarray:
    """This process's share of a global batch array (contiguous rows, as global_batch expects)."""
    local = len(global_rows) // jax.process_count()
    start = jax.process_index() * local
    return global_rows[start:start + local]


def _abstract_batch(features: dict, batch_size: int, length: int, sharding) -> dict:
    """ShapeDtypeStructs of a global batch of `batch_size` rows cut to `length`."""
    return {k: jax.ShapeDtypeStruct((batch_size, length) if v.ndim >= 2 and k != "length"
                                    else (batch_size, *v.shape[1:]), v.dtype, sharding=sharding)
            for k, v in features.items()}


def _abstract_packed(example: dict, shape: tuple[int, int], sharding) -> dict:
    """ShapeDtypeStructs of a packed batch of [rows, length] `shape` (example arrays: theirs)."""
    return {k: jax.ShapeDtypeStruct(shape if v.ndim >= 2 else v.shape, v.dtype, sharding=sharding)
            for k, v in example.items()}


def _padded_rows(rows: np.ndarray, size: int) -> np.ndarray:
    """`rows` padded to `size` with copies of its first row (their outputs are dropped)."""
    return np.concatenate([rows, np.repeat(rows[:1], size - len(rows))])


def load_pretrained(spec: FineTuneSpec, init_checkpoint: str):
    """`make_model` with the checkpoint's weights: everything but the head must be there."""
    def load(model):
        if spec.init_params is None:
            return
        unused = load_flat_params(model, spec.init_params, source=init_checkpoint,
                                  allow_missing=spec.head_prefixes)
        heads = sorted({name.split("/")[0] for name in unused})
        if heads:
            logging.info("init_checkpoint %s: not used here: %s", init_checkpoint, heads)
    return load


def run(spec: FineTuneSpec, config: ml_collections.ConfigDict, workdir: str,
        preemption: Preemption, compiled: CompiledSteps | None = None) -> FineTuneResult:
    """Fine-tunes (or resumes) in `workdir` and evaluates; see the module docstring.

    `config` carries run_classifier's fields (train_batch_size,
    eval_batch_size, learning_rate, num_train_epochs, warmup_proportion,
    seed, max_seq_length, init_checkpoint), the optimizer's, the loop's
    (log_every, checkpoint_every, keep_checkpoints), length_buckets,
    freeze_encoder and mesh. `compiled`: the previous run's steps (a sweep
    reuses them when the model, optimizer kind and mesh agree).
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
    # The learning rate is an input of the step (computed here from the
    # schedule), so runs that differ only in learning rate, epochs or seed
    # (a sweep) share one compiled step.
    schedule = make_learning_rate_schedule(
        peak_value=c.learning_rate, num_train_steps=steps,
        warmup_steps=int(steps * c.warmup_proportion), kind="bert")
    optimizer = _optimizer_with_learning_rate_input(c, abstract_params)
    shardings = state_shardings(optimizer, abstract_params, param_shardings, sharded.mesh)
    steps_key = (id(spec), c.optimizer, c.weight_decay, c.adam_b1, c.adam_b2, c.adam_eps,
                 c.max_grad_norm, c.freeze_encoder, c.mesh.to_json())
    abstract_state = abstract_train_state(optimizer, abstract_params, shardings, c.seed)
    if compiled is None or compiled.key != steps_key:
        train, predict = _jitted_steps(spec, graphdef, optimizer, shardings, sharded)
        compiled = CompiledSteps(steps_key, AheadOfTime(train, abstract_state), predict)
    train_step, predict_step = compiled.train_step, compiled.predict_step
    learning_rate_spec = jax.ShapeDtypeStruct((), np.float32, sharding=sharded.replicated)

    def predict_with(params) -> Callable[[dict], Any]:
        return make_predict(params, predict_step, batch_sharding, c.eval_batch_size, buckets)

    packing = c.packing and spec.packable
    row_multiple = math.lcm(4, jax.device_count() // max(c.mesh.tensor, 1))

    # Batches: a function of the step, so resuming needs no iterator state.
    def host_batch(step: int) -> dict:
        """The whole global batch of `step`, packed or cut to its length bucket."""
        rows = train_batch_indices(step, c.train_batch_size, num_examples, c.seed)
        length = length_bucket(int(spec.train_features["length"][rows].max()), buckets)
        if packing:
            # Rows as long as the batch's bucket, but at least packed_row_length: attention
            # (and its dropout) grows with the square of the row, so short rows pay.
            row_length = max(length, min(c.packed_row_length, c.max_seq_length))
            return pack_batch(take_rows(spec.train_features, rows, row_length), row_length,
                              row_multiple)
        return take_rows(spec.train_features, rows, length)

    def batches(first_step: int):
        for step in range(first_step, steps):
            local = {k: _local_part(v) for k, v in host_batch(step).items()}
            yield mesh.global_batch(local, batch_sharding), np.float32(schedule(step))

    # Every training shape is compiled now, not inside the timed loop.
    if packing:
        shapes = {host_batch(s)["input_ids"].shape for s in range(steps)}
        example = host_batch(0)
        for shape in sorted(shapes):
            train_step.compile(_abstract_packed(example, shape, batch_sharding),
                               learning_rate_spec)
    else:
        for length in buckets:
            train_step.compile(_abstract_batch(spec.train_features, c.train_batch_size, length,
                                               batch_sharding), learning_rate_spec)

    # State: resume, or the pretrained encoder with a fresh head.
    checkpointer = Checkpointer(workdir, save_interval_steps=c.checkpoint_every or steps_per_epoch,
                                max_to_keep=c.keep_checkpoints)
    restored = checkpointer.restore_latest(abstract_state)
    if restored is not None:
        state = restored.state
        report(f"resumed from the checkpoint at step {restored.step} in {workdir}")
    else:
        state = new_train_state(make_model, optimizer, c.seed, shardings,
                                load_params=load_pretrained(spec, c.init_checkpoint))
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
    result = loop.train(state, lambda state, item: train_step(state, *item), batches(step),
                        step=step, settings=settings,
                        checkpointer=checkpointer, writer=writer, preemption=preemption,
                        evaluate=evaluate)
    checkpointer.close()
    writer.close()
    if result.preempted:
        return FineTuneResult({}, {}, None, None, compiled, preempted=True)

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
    return FineTuneResult(best["metrics"], final, best_params, predict_with(best_params), compiled)


def make_predict(params, predict_step, batch_sharding, batch_size: int,
                 buckets: tuple[int, ...]) -> Callable[[dict], Any]:
    """predict(features): the model's outputs for every row, in their order (host numpy).

    Rows are sorted by length so batches pad little; each global batch is
    padded to `batch_size` rows and its length to a bucket.
    """
    def predict(features: dict) -> Any:
        n = len(features["input_ids"])
        order = np.argsort(features["length"], kind="stable")  # similar lengths together
        chunks = []
        for start in range(0, n, batch_size):
            rows = _padded_rows(order[start:start + batch_size], batch_size)
            length = length_bucket(int(features["length"][rows].max()), buckets)
            local = take_rows(features, _local_part(rows), length)
            out = predict_step(params, mesh.global_batch(local, batch_sharding))
            real = min(batch_size, n - start)
            chunks.append(jax.tree.map(lambda x: np.asarray(x)[:real], host_values(out)))
        outputs = jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)
        inverse = np.empty(n, np.int64)
        inverse[order] = np.arange(n)
        return jax.tree.map(lambda x: x[inverse], outputs)

    return predict


def load_predictor(spec: FineTuneSpec, config: ml_collections.ConfigDict, checkpoint_dir: str,
                   compiled: CompiledSteps | None = None) -> Callable[[dict], Any]:
    """predict(features) with the parameters of a bert_jax folder (e.g. a run's best/)."""
    def make_model():
        return spec.make_model(spec.model_config, nnx.Rngs(0))

    sharded = shard_model(make_model, config.mesh)
    if compiled is None:
        optimizer = _optimizer_with_learning_rate_input(config, sharded.abstract_params)
        shardings = state_shardings(optimizer, sharded.abstract_params, sharded.param_shardings,
                                    sharded.mesh)
        _, predict = _jitted_steps(spec, sharded.graphdef, optimizer, shardings, sharded)
        compiled = CompiledSteps((), None, predict)
    params = _load_best(checkpoint_dir, make_model, sharded.param_shardings)
    return make_predict(params, compiled.predict_step, sharded.batch_sharding,
                        config.eval_batch_size, buckets_for(config.max_seq_length,
                                                            config.length_buckets))


def read_results(workdir: str) -> dict:
    """WORKDIR/eval_results.json, as `run` wrote it."""
    return _read_json(os.path.join(workdir, RESULTS_FILE))


def _optimizer_with_learning_rate_input(c, abstract_params: dict):
    """The config's optimizer with its learning rate held in its state (set every step)."""
    def make(learning_rate):
        optimizer = make_optimizer(c.optimizer, learning_rate, weight_decay=c.weight_decay,
                                   b1=c.adam_b1, b2=c.adam_b2, eps=c.adam_eps,
                                   clip_norm=c.max_grad_norm if c.max_grad_norm > 0 else None)
        return _frozen_encoder(optimizer, abstract_params) if c.freeze_encoder else optimizer

    return optax.inject_hyperparams(make)(learning_rate=0.0)


def _jitted_steps(spec: FineTuneSpec, graphdef, optimizer, shardings, sharded):
    def train_step(state, batch, learning_rate):
        key = dropout_key(state)

        def loss_of(params):
            model = nnx.merge(graphdef, params)
            outputs = model(**spec.model_inputs(batch), deterministic=False,
                            rngs=nnx.Rngs(dropout=key))
            return spec.loss(outputs, batch)

        (loss, metrics), grads = jax.value_and_grad(loss_of, has_aux=True)(state["params"])
        opt_state = state["opt_state"]
        hyperparams = dict(opt_state.hyperparams, learning_rate=learning_rate)
        state = dict(state, opt_state=opt_state._replace(hyperparams=hyperparams))
        return apply_gradients(state, grads, optimizer, lambda _: learning_rate,
                               dict(metrics, loss=loss))

    def predict_step(params, batch):
        model = nnx.merge(graphdef, params)
        return model(**spec.model_inputs(batch), deterministic=True)

    train = jax.jit(train_step,
                    in_shardings=(shardings, sharded.batch_sharding, sharded.replicated),
                    out_shardings=(shardings, sharded.replicated), donate_argnums=0)
    predict = jax.jit(predict_step, in_shardings=(sharded.param_shardings, sharded.batch_sharding),
                      out_shardings=sharded.replicated)
    return train, predict


def _frozen_encoder(optimizer: optax.GradientTransformation, abstract_params: dict):
    """Updates only the task head; the encoder (`bert/`) stays as loaded."""
    # Encoder gradients are zeroed before the optimizer (clipping sees the head's
    # alone) and its updates after it (weight decay would move the weights).
    frozen = {name: jax.tree.map(lambda _, n=name: n == "bert", tree)
              for name, tree in abstract_params.items()}
    freeze = optax.masked(optax.set_to_zero(), frozen)
    return optax.chain(freeze, optimizer, freeze)


def _load_best(checkpoint_dir: str, make_model, param_shardings):
    """A whole model (head included) from a checkpoint of any format, in its shardings."""
    model = nnx.eval_shape(make_model)
    load_flat_params(model, read_checkpoint(checkpoint_dir).params, source=checkpoint_dir)
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

