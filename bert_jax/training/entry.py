"""The command line every trainer shares: --config FILE:PRESET, --workdir, the job flags.

A trainer's module ends with

    if __name__ == "__main__":
        entry.run(train_and_evaluate, "configs/pretrain.py:tiny")
"""
from typing import Callable

import ml_collections
from absl import app, flags, logging
from ml_collections import config_flags

from bert_jax.training import distributed


def run(train_and_evaluate: Callable[[ml_collections.ConfigDict, str], object],
        example_config: str) -> None:
    """Defines the flags, parses them and calls train_and_evaluate(config, workdir)."""
    config_flags.DEFINE_config_file("config", None, f"Config file and preset, e.g. "
                                    f"{example_config}.", lock_config=True)
    flags.DEFINE_string("workdir", None, "Checkpoints, metrics and outputs go here.")
    distributed.define_flags()

    def main(argv):
        del argv
        f = flags.FLAGS
        if f.config is None or not f.workdir:
            raise app.UsageError("--config and --workdir are required")
        if not f["verbosity"].present:
            logging.set_verbosity(logging.WARNING)
        distributed.initialize_from_flags()
        train_and_evaluate(f.config, f.workdir)

    app.run(main)
