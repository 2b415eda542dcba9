"""Joining a multi-process JAX job: the command-line flags every entry point shares."""
import jax
from absl import flags


def define_flags() -> None:
    """--distributed, --coordinator_address, --num_processes, --process_id."""
    flags.DEFINE_bool("distributed", False, "Join a multi-process JAX job (jax.distributed): with "
                      "the three flags below, or detected from SLURM / TPU VM environments.")
    flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
    flags.DEFINE_integer("num_processes", None, "Processes in the job.")
    flags.DEFINE_integer("process_id", None, "This process's index.")


def initialize_from_flags() -> None:
    """Calls jax.distributed.initialize when the flags ask for a job of several processes.

    Must run before anything touches a device. Flags left unset are detected
    by JAX (SLURM, TPU VM pods).
    """
    f = flags.FLAGS
    if f.distributed or f.coordinator_address:
        jax.distributed.initialize(coordinator_address=f.coordinator_address,
                                   num_processes=f.num_processes, process_id=f.process_id)
