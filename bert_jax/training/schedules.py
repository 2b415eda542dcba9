"""Learning-rate schedules.

Two shapes, picked by `kind` (the config field `schedule.kind`):

- `"bert"`: google-research/bert's `optimization.create_optimizer`. The
  polynomial decay `peak * (1 - step / num_train_steps) ** power` is counted from
  step 0, and for `step < warmup_steps` the linear warmup
  `peak * step / warmup_steps` *replaces* it. So at the end of warmup the rate
  jumps from `peak * (W - 1) / W` to `peak * (1 - W / N) ** power`, not to
  `peak`: that is what BERT was trained with.
- `"warmup_then_decay"`: the optax `warmup_*` shape. Linear warmup to the peak,
  then the polynomial decay runs over the remaining `num_train_steps -
  warmup_steps` steps, so the rate is continuous and reaches `end_value` at
  `num_train_steps`.

Both end at `end_value` (0 in BERT) and stay there past `num_train_steps`.
"""
import jax.numpy as jnp
import optax

SCHEDULE_KINDS = ("bert", "warmup_then_decay")


def make_learning_rate_schedule(
    *,
    peak_value: float,
    num_train_steps: int,
    warmup_steps: int,
    kind: str = "bert",
    power: float = 1.0,
    end_value: float = 0.0,
) -> optax.Schedule:
    """Returns `step -> learning rate` (see the module docstring for `kind`).

    Args:
      peak_value: the learning rate at the end of warmup (G-BERT's `init_lr`).
      num_train_steps: the step at which the decay reaches `end_value`.
      warmup_steps: length of the linear warmup from 0; 0 disables it.
      kind: `"bert"` or `"warmup_then_decay"`.
      power: polynomial decay power; 1.0 is linear (BERT), NVIDIA's LAMB recipe
        uses 0.5.
      end_value: the final learning rate.
    """
    if kind not in SCHEDULE_KINDS:
        raise ValueError(f"schedule kind {kind!r} is not one of {SCHEDULE_KINDS}")
    if num_train_steps <= 0:
        raise ValueError(f"num_train_steps must be positive, got {num_train_steps}")
    if not 0 <= warmup_steps < num_train_steps:
        raise ValueError(
            f"warmup_steps must be in [0, num_train_steps={num_train_steps}), got {warmup_steps}"
        )
    warmup = optax.linear_schedule(0.0, peak_value, max(warmup_steps, 1))
    if kind == "warmup_then_decay":
        decay = optax.polynomial_schedule(
            peak_value, end_value, power, num_train_steps - warmup_steps
        )
        # join_schedules hands the decay `step - warmup_steps`.
        return optax.join_schedules([warmup, decay], [warmup_steps])

    decay_from_zero = optax.polynomial_schedule(peak_value, end_value, power, num_train_steps)

    def bert_schedule(step):
        # Both branches are cheap; `where` keeps the schedule jit- and scan-friendly.
        return jnp.where(step < warmup_steps, warmup(step), decay_from_zero(step))

    return bert_schedule
