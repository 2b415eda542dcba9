"""Pretraining configs.

    python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir /tmp/bert_tiny
    python -m bert_jax.pretrain --config configs/pretrain.py:base_phase1 --workdir gs://... \
        --config.data.train_files='/data/wiki/*.tfrecord' --config.train.batch_size=512

Presets (after the colon):
  tiny          the README's main job: a 2-layer model on the embedded default
                corpus (built on first use), a few minutes on a laptop CPU.
  base_phase1   BERT-base, seq 128, 900k steps x 256, lr 1e-4, warmup 10k,
                20 predictions (the BERT paper's first 90%).
  base_phase2   BERT-base, seq 512, 100k steps, 80 predictions, initialised
                from phase 1 (set train.init_checkpoint).
  large_phase1  BERT-large, likewise.
  large_phase2
  nvidia_lamb   BERT-large phase 1 with LAMB at batch 65,536 (NVIDIA's recipe:
                lr 6e-3, warmup 2,000 of 7,038 steps, polynomial decay 0.5).
"""
import ml_collections

from bert_jax.training.mesh import DEFAULT_RULES
from configs import model as model_config

PRESETS = ("tiny", "base_phase1", "base_phase2", "large_phase1", "large_phase2", "nvidia_lamb")


def get_config(arg: str = "tiny") -> ml_collections.ConfigDict:
    """The pretraining config of preset `arg` (see the module docstring)."""
    if arg not in PRESETS:
        raise ValueError(f"unknown preset {arg!r}; choose one of {PRESETS}")
    config = ml_collections.ConfigDict()
    config.preset = arg

    # The architecture: the fields of bert_jax.model_config.BertConfig.
    size = {"tiny": "tiny", "nvidia_lamb": "large"}.get(arg, arg.split("_")[0])
    config.model = model_config.get_config(size)
    # google-research/bert's "gelu" is the tanh approximation; BertConfig's
    # default "gelu" is the exact erf form (Hugging Face's name).
    config.model.hidden_act = "gelu_tanh"

    config.data = ml_collections.ConfigDict()
    # Comma lists and/or globs of TFRecords in google-research/bert's format.
    # Empty train_files with default_corpus=True builds the embedded corpus.
    config.data.train_files = ""
    config.data.eval_files = ""  # held-out TFRecords; empty: no evaluation
    config.data.default_corpus = False  # build and use the embedded corpus
    config.data.cache_dir = ""  # where the default corpus goes ('' = WORKDIR/data)
    config.data.vocab_file = ""  # vocab.txt, stored with exported checkpoints
    # How the files were tokenized (create_pretraining_data's flag); recorded in
    # export/tokenizer_config.json so fine-tuning tokenizes the same way.
    config.data.do_lower_case = True
    config.data.max_seq_length = 128  # must equal the files' padded length
    config.data.max_predictions_per_seq = 20  # likewise for the masked-LM features
    config.data.dynamic_masking = False  # mask in the pipeline (unmasked files)
    config.data.masked_lm_prob = 0.15  # dynamic masking only
    config.data.whole_word_mask = False  # dynamic masking only
    config.data.shuffle_buffer = 10_000  # examples held for shuffling
    config.data.eval_batches = 50  # batches per evaluation (0 = the whole set)

    config.train = ml_collections.ConfigDict()
    config.train.batch_size = 256  # global, over all hosts and devices
    config.train.grad_accum_steps = 1  # micro-batches per step (batch_size divides)
    config.train.num_steps = 900_000
    config.train.learning_rate = 1e-4  # peak
    config.train.warmup_steps = 10_000
    config.train.schedule = "bert"  # "bert" (decay counted from 0) or "warmup_then_decay"
    config.train.decay_power = 1.0  # 1.0 linear; NVIDIA's LAMB uses 0.5
    config.train.optimizer = "bert_adam"  # "bert_adam" (G-BERT exact), "adamw", "lamb"
    config.train.weight_decay = 0.01  # not on LayerNorm or biases
    config.train.adam_b1 = 0.9
    config.train.adam_b2 = 0.999
    config.train.adam_eps = 1e-6
    config.train.max_grad_norm = 1.0  # global-norm clipping before the optimizer
    config.train.seed = 0  # params init, dropout and data order
    # Start from another checkpoint (phase 2). init_mode "params": any
    # bert_jax/hf/tf_v1 checkpoint, fresh optimizer. "full": a pretraining
    # workdir's newest checkpoint, optimizer moments too (same optimizer);
    # either way the step and schedule restart from 0.
    config.train.init_checkpoint = ""
    config.train.init_mode = "params"
    config.train.log_every = 100  # steps between log lines / metrics.jsonl rows
    config.train.eval_every = 10_000  # steps between evaluations (0 = never)
    config.train.checkpoint_every = 10_000  # steps between checkpoints
    config.train.keep_checkpoints = 3  # newest checkpoints kept
    config.train.keep_period = 0  # also keep every N-th step forever (0 = none)
    config.train.export_params = True  # write WORKDIR/export (bert_jax format) at the end
    config.require_init_checkpoint = False  # phase 2 presets refuse to start from scratch

    # Device mesh (data, fsdp, tensor); one size may be -1, meaning "the rest".
    config.mesh = ml_collections.ConfigDict()
    config.mesh.data = -1
    config.mesh.fsdp = 1
    config.mesh.tensor = 1
    # Logical axis name -> mesh axis (or None). Parameters are named in
    # bert_jax/model.py; `batch` is the batch axis of every input.
    config.mesh.rules = [list(rule) for rule in DEFAULT_RULES]

    if arg == "tiny":
        config.model.vocab_size = 8000  # the default corpus's own WordPiece vocab
        config.data.default_corpus = True
        config.data.eval_batches = 20
        config.train.batch_size = 32
        config.train.num_steps = 800  # ~5 minutes on a 2-core CPU
        config.train.learning_rate = 1e-3  # a tiny model and short run tolerate more
        # A long warmup: reaching 1e-3 within 80 steps left this post-LN model
        # stuck at unigram accuracy (~0.067) for the whole run.
        config.train.warmup_steps = 300
        config.train.log_every = 50
        config.train.eval_every = 400
        config.train.checkpoint_every = 200
    elif arg.endswith("phase2"):
        config.data.max_seq_length = 512
        config.data.max_predictions_per_seq = 80
        config.train.num_steps = 100_000
        config.require_init_checkpoint = True  # set train.init_checkpoint
    elif arg == "nvidia_lamb":
        config.train.optimizer = "lamb"
        config.train.batch_size = 65_536
        config.train.grad_accum_steps = 256
        config.train.num_steps = 7_038
        config.train.learning_rate = 6e-3
        config.train.warmup_steps = 2_000
        config.train.schedule = "warmup_then_decay"
        config.train.decay_power = 0.5
        config.train.eval_every = 1_000
        config.train.checkpoint_every = 200
    return config
