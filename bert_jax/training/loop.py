"""The training loop every trainer shares: steps, logging, evaluation, checkpoints, stops.

    result = loop.train(state, train_step, batches, checkpointer=..., settings=...,
                        writer=..., preemption=..., evaluate=...)

Per step: one jitted `train_step(state, batch) -> (state, metrics)`; the
metrics stay on the devices until a log interval, where they are fetched,
averaged and written (metrics.jsonl, TensorBoard, one line on stdout).
`evaluate(state, step)` runs every `eval_every` steps and at the end. A
checkpoint is saved at every multiple of the checkpointer's interval, at the
end, and when SIGTERM reaches any process (then the loop returns early).

A step whose metrics say `finite = False` (a NaN or Inf loss or gradient;
the step function leaves the state untouched then) stops the run with an
error naming the step: nothing is saved over the last good checkpoint.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Iterator

import jax
import numpy as np

from bert_jax.checkpoints.train_state import Checkpointer
from bert_jax.training.metrics_writer import MetricsWriter
from bert_jax.training.preemption import Preemption
from bert_jax.training.reporting import format_duration, format_metrics, host_values, report


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """How long to train and how often to report, evaluate and measure."""

    num_steps: int
    log_every: int
    eval_every: int  # 0: only at the end
    examples_per_step: int  # the global batch
    tokens_per_example: int  # for tokens/s
    flops_per_example: float  # useful training FLOPs, for MFU
    peak_flops: float  # of all devices together
    # Metric name -> short label on the log line (all metrics go to metrics.jsonl).
    log_labels: tuple[tuple[str, str], ...] = ()
    progress_bar: bool = False  # a tqdm bar on stderr (steps, ETA, examples/s), process 0


@dataclasses.dataclass
class LoopResult:
    """Where the loop stopped."""

    state: Any
    step: int
    last_metrics: dict  # the last logged interval, plus the final evaluation
    preempted: bool  # stopped by SIGTERM before num_steps
    trained: bool  # False when the run had already finished before this call


def train(state: Any, train_step: Callable, batches: Iterator, *, step: int,
          settings: LoopSettings, checkpointer: Checkpointer, writer: MetricsWriter,
          preemption: Preemption, evaluate: Callable[[Any, int], dict] | None = None,
          save_extras: dict | None = None) -> LoopResult:
    """Trains from `step` to `settings.num_steps`; see the module docstring.

    Args:
      state: the train state (training.state), already on the devices.
      train_step: jitted (state, global batch) -> (state, metrics); metrics
        hold scalars, among them `loss`, `learning_rate`, `grad_norm`, `finite`.
      batches: yields global batches (training.mesh.global_batch).
      step: the state's step.
      checkpointer: saves with `save_extras` (the input iterator, metadata).
      evaluate: (state, step) -> {"eval_...": value}; None when there is no
        evaluation set.
    """
    s = settings
    save_extras = save_extras or {}
    first_step = step
    history: list = []
    last: dict = {}
    interval_start, interval_step = time.perf_counter(), step
    paused = 0.0  # seconds of this interval spent evaluating: not training throughput
    bar = _progress_bar(s, step)

    def run_eval(final: bool) -> dict:
        nonlocal paused
        started = time.perf_counter()
        result = evaluate(state, step) if evaluate is not None else {}
        paused += time.perf_counter() - started
        if result:
            writer.write(step, result)
            report(f"{'final eval' if final else 'eval'} at step {step}: "
                   + format_metrics(result))
        return result

    while step < s.num_steps:
        state, metrics = train_step(state, next(batches))
        step += 1
        history.append(metrics)
        if step == first_step + 1 and step % s.log_every and step != s.num_steps:
            # Leave compilation out of the first interval's throughput.
            jax.block_until_ready(metrics)
            interval_start, interval_step = time.perf_counter(), step
        if bar is not None:
            bar.update(1)
        if not host_values(metrics["finite"]):
            checkpointer.wait_until_finished()
            raise FloatingPointError(
                f"non-finite loss or gradient at step {step}; nothing was saved over the last "
                f"good checkpoint (step {checkpointer.latest_step()}) in {checkpointer.directory}")
        if step % s.log_every == 0 or step == s.num_steps:
            seconds = time.perf_counter() - interval_start - paused
            last = _interval_metrics(host_values(history), step - interval_step, seconds, s)
            writer.write(step, last)
            report(_log_line(step, last, (s.num_steps - step) * seconds
                             / max(step - interval_step, 1), s))
            history, interval_start, interval_step = [], time.perf_counter(), step
            paused = 0.0
            if bar is not None:
                bar.set_postfix_str(f"{last['sequences_per_second']:.1f} ex/s "
                                    f"loss {last['loss']:.4f}", refresh=False)
        if s.eval_every and step % s.eval_every == 0 and step != s.num_steps:
            run_eval(final=False)
        if step != s.num_steps:
            # Writes only at the checkpoint interval. The iterator has consumed
            # exactly `step` batches here, so its saved position matches.
            checkpointer.save(step, state, **save_extras)
        if preemption.agreed():
            checkpointer.save(step, state, force=True, **save_extras)
            checkpointer.wait_until_finished()
            if bar is not None:
                bar.close()
            report(f"preempted: checkpoint at step {step} saved; exiting")
            return LoopResult(state, step, last, preempted=True, trained=step > first_step)

    if bar is not None:
        bar.close()
    checkpointer.save(step, state, force=True, **save_extras)  # no-op if already saved
    trained = step > first_step  # False when restarted after the run had finished
    if trained:
        last.update(run_eval(final=True))
    checkpointer.wait_until_finished()
    return LoopResult(state, step, last, preempted=False, trained=trained)


def _progress_bar(s: LoopSettings, step: int):
    if not s.progress_bar or jax.process_index() != 0:
        return None
    import tqdm

    return tqdm.tqdm(total=s.num_steps, initial=step, unit="step", mininterval=2.0,
                     dynamic_ncols=True)


def _interval_metrics(fetched: list[dict], steps: int, seconds: float,
                      s: LoopSettings) -> dict:
    """Means over the interval's steps, the last learning rate, and throughput."""
    out = {k: float(np.mean([m[k] for m in fetched]))
           for k in fetched[0] if k not in ("finite", "learning_rate")}
    examples_per_second = steps * s.examples_per_step / seconds
    out.update(learning_rate=float(fetched[-1]["learning_rate"]),
               sequences_per_second=examples_per_second,
               tokens_per_second=examples_per_second * s.tokens_per_example,
               mfu=examples_per_second * s.flops_per_example / s.peak_flops)
    return out


def _log_line(step: int, m: dict, eta_seconds: float, s: LoopSettings) -> str:
    labelled = "".join(f" {label} {m[key]:.4f}" for key, label in s.log_labels if key in m)
    return (f"step {step}/{s.num_steps} loss {m['loss']:.4f}{labelled} "
            f"lr {m['learning_rate']:.3g} grad_norm {m['grad_norm']:.3f} "
            f"{m['sequences_per_second']:.1f} seq/s {m['tokens_per_second']:.0f} tok/s "
            f"mfu {m['mfu']:.1%} eta {format_duration(eta_seconds)}")
