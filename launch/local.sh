#!/usr/bin/env bash
# Runs one pretraining job as several JAX processes on this machine, the way a
# cluster would (jax.distributed over 127.0.0.1). Useful to try multi-host
# settings before a real launch, and on a multi-GPU box (one process per GPU).
#
#   NUM_PROCESSES=2 DEVICES_PER_PROCESS=2 launch/local.sh \
#       --config configs/pretrain.py:tiny --workdir /tmp/bert_2proc
#
# NUM_PROCESSES        processes to start (default 2)
# DEVICES_PER_PROCESS  fake CPU devices per process (default 1); on GPUs set
#                      GPUS_PER_PROCESS instead (process i gets GPUs i*G..i*G+G-1)
# PYTHON               interpreter (default: python3)
# Every other argument goes to `python -m bert_jax.pretrain`. Process 0's output
# is shown; the others' goes to WORKDIR-independent logs in $LOG_DIR (default
# /tmp/bert_jax_local_<pid>). SIGTERM/SIGINT are passed on to every process
# (the job agrees on a step, saves a checkpoint there and exits 0).
set -euo pipefail
cd "$(dirname "$0")/.."

num=${NUM_PROCESSES:-2}
python=${PYTHON:-python3}
log_dir=${LOG_DIR:-/tmp/bert_jax_local_$$}
mkdir -p "$log_dir"
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

pids=()
for ((i = 0; i < num; i++)); do
  env_vars=()
  if [[ -n "${GPUS_PER_PROCESS:-}" ]]; then
    first=$((i * GPUS_PER_PROCESS))
    env_vars+=("CUDA_VISIBLE_DEVICES=$(seq -s, "$first" $((first + GPUS_PER_PROCESS - 1)))")
  else
    env_vars+=(JAX_PLATFORMS=cpu "XLA_FLAGS=--xla_force_host_platform_device_count=${DEVICES_PER_PROCESS:-1}")
  fi
  cmd=(env "${env_vars[@]}" "$python" -m bert_jax.pretrain "$@"
       --coordinator_address "127.0.0.1:$port" --num_processes "$num" --process_id "$i")
  if ((i == 0)); then
    "${cmd[@]}" &
  else
    "${cmd[@]}" > "$log_dir/process_$i.log" 2>&1 &
  fi
  pids+=($!)
done

forward() { kill -"$1" "${pids[@]}" 2>/dev/null || true; }
trap 'forward TERM' TERM
trap 'forward INT' INT

status=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    status=1
    echo "process $i failed; see $log_dir/process_$i.log" >&2
    forward TERM  # the others would wait for it at the next collective
  fi
done
exit $status
