"""What every trainer shares (pretraining and each fine-tuning task).

Modules, in the order a trainer uses them:
  entry           the command line: --config FILE:PRESET, --workdir, job flags
  distributed     joining a multi-process job (jax.distributed)
  run_config      config checks that name the field; WORKDIR/config.json
  preemption      SIGTERM -> save at the next step boundary, exit 0
  mesh            the (data, fsdp, tensor) mesh, logical-axis rules, global batches
  optimizers      bert_adam / adamw / lamb, decay mask, gradient accumulation
  schedules       warmup + decay learning rates
  state           the train state pytree, its shardings, a fresh start
  updates         the end of every train step (apply, unless non-finite)
  loop            steps, logging, evaluation, checkpoints, stops
  metrics_writer  metrics.jsonl and TensorBoard
  reporting       progress lines, host copies of metrics
  flops           model FLOPs and the peak for MFU
  export          a run's parameters as a bert_jax checkpoint folder

Imported by module (`from bert_jax.training import loop, mesh`); never
imports a task or an entry point.
"""
