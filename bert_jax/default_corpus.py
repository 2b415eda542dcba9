"""Writes the embedded default pretraining corpus (documentation already on this machine).

    python -m bert_jax.default_corpus --output=corpus.txt [--max_megabytes=8]

What the corpus is made of: bert_jax/pretraining/embedded_corpus.py.
"""
import json
from collections.abc import Sequence

from absl import app, flags

from bert_jax.pretraining.embedded_corpus import build_default_corpus


def main(argv: Sequence[str]) -> None:
    """CLI: writes the corpus and prints its stats as JSON."""
    del argv
    f = flags.FLAGS
    stats = build_default_corpus(f.output, int(f.max_megabytes * 1e6), f.overwrite)
    print(json.dumps(stats))


if __name__ == "__main__":
    flags.DEFINE_string("output", None, "Output text file.", required=True)
    flags.DEFINE_float("max_megabytes", 8.0, "Stop before the corpus exceeds this size.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing output.")
    app.run(main)
