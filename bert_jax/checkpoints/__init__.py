"""Checkpoints: every format's readers and writers, and resumable training state.

    from bert_jax.checkpoints import load_model, read_checkpoint
    read = read_checkpoint("path")            # CheckpointData(config, params, missing, vocab_file)
    model = load_model("path", BertModel)     # any format into any of our models

Modules: `formats` (read_checkpoint / write_checkpoint / detect_format /
load_model over the three formats), `bert_jax_folder` (our export folder),
`hf_format` and `tf_v1_format` (Hugging Face, google-research/bert),
`weight_names` (one table of tensor names for both), `flat_params` (flat
'/'-joined parameter dicts, the common currency), `train_state` (async,
rotating Orbax checkpoints of a run, with the input position), and
`iterator_state` (the tf.data position as an Orbax item; imported only when
a checkpoint carries one, so nothing else here needs TensorFlow).
"""
from bert_jax.checkpoints.flat_params import (
                                              CheckpointData,
                                              flat_params,
                                              load_flat_params,
                                              param_paths,
)
from bert_jax.checkpoints.formats import (
                                              INPUT_FORMATS,
                                              OUTPUT_FORMATS,
                                              detect_format,
                                              load_model,
                                              read_checkpoint,
                                              read_config,
                                              write_checkpoint,
)
from bert_jax.checkpoints.train_state import Checkpointer, Restored, load_pytree, save_pytree

__all__ = [
    "INPUT_FORMATS", "OUTPUT_FORMATS", "CheckpointData", "Checkpointer", "Restored",
    "detect_format", "flat_params", "load_flat_params", "load_model", "load_pytree",
    "param_paths", "read_checkpoint", "read_config", "save_pytree", "write_checkpoint",
]
