"""SQuAD fine-tuning configs (google-research/bert's run_squad flag names).

    python -m bert_jax.finetune_squad --config configs/squad.py:v1 --workdir /tmp/squad \
        --config.train_file=train-v1.1.json --config.predict_file=dev-v1.1.json \
        --config.init_checkpoint=CKPT

Presets: v1 (SQuAD 1.1) and v2 (SQuAD 2.0: unanswerable questions, null odds,
the best threshold). Keys may follow after a comma: `v2,seed=1`.
"""
import ml_collections

from bert_jax.training.mesh import DEFAULT_RULES


def get_config(arg: str = "v1") -> ml_collections.ConfigDict:
    """The fine-tuning config of preset `arg` = v1|v2[,key=value...]."""
    version, *pairs = [part.strip() for part in (arg or "v1").split(",")]
    if version not in ("v1", "v2"):
        raise ValueError(f"unknown SQuAD preset {version!r}; choose v1 or v2")
    c = ml_collections.ConfigDict()
    c.version_2_with_negative = version == "v2"  # SQuAD 2.0: some questions have no answer
    c.train_file = ""  # SQuAD JSON to train on (do_train)
    c.predict_file = ""  # SQuAD JSON to predict and evaluate (do_predict)
    c.do_train = True
    c.do_predict = True
    c.init_checkpoint = ""  # any format convert reads
    c.vocab_file = ""  # default: the checkpoint's own vocab.txt
    c.do_lower_case = ml_collections.config_dict.placeholder(bool)  # None: the checkpoint's
    c.max_seq_length = 384  # tokens per window
    c.doc_stride = 128  # windows start this many pieces apart
    c.max_query_length = 64  # question pieces kept
    c.train_batch_size = 32  # global
    c.predict_batch_size = 32  # global
    c.learning_rate = 5e-5
    c.num_train_epochs = 3.0
    c.warmup_proportion = 0.1
    c.n_best_size = 20  # candidate starts and ends per window
    c.max_answer_length = 30  # word pieces
    c.null_score_diff_threshold = 0.0  # v2: predict "" when null - best > this
    c.seed = 0
    c.optimizer = "bert_adam"  # run_squad's Adam without bias correction; "adamw"; "lamb"
    c.weight_decay = 0.01
    c.adam_b1 = 0.9
    c.adam_b2 = 0.999
    c.adam_eps = 1e-6
    c.max_grad_norm = 1.0
    c.dtype = "float32"
    c.freeze_encoder = False
    c.packing = False  # span labels are per token: windows are not packed
    c.packed_row_length = 0
    # No shorter buckets: as run_squad, the start/end softmax runs over all
    # max_seq_length positions, padding included, and decoding sees them all.
    c.length_buckets = []
    c.eval_batch_size = c.get_ref("predict_batch_size")
    c.log_every = 50
    c.progress_bar = True
    c.checkpoint_every = 0  # 0: once per epoch
    c.keep_checkpoints = 2
    c.cache_dir = ""  # converted features are cached here ('' = WORKDIR/features)

    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1
    c.mesh.fsdp = 1
    c.mesh.tensor = 1
    c.mesh.rules = [list(rule) for rule in DEFAULT_RULES]
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in c:
            raise ValueError(f"configs/squad.py:{arg}: {pair!r} is not a known key=value")
        c[key] = type(c[key])(value)
    return c
