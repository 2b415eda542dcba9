"""SIGTERM (preemption, `scancel`, a TPU maintenance event) as a flag the loop checks."""
import signal

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils


class Preemption:
    """Turns SIGTERM into a request to save at the next step boundary and exit 0.

    Create it first thing in a trainer: set-up (building a corpus, converting
    features) can take minutes, and a signal then must not kill the job.
    """

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
        requested = multihost_utils.process_allgather(np.int32(self.requested))
        return bool(np.max(requested))

    def _handle(self, signum, frame):
        del signum, frame
        logging.warning("SIGTERM: saving a checkpoint at the next step boundary")
        self.requested = True
