"""The BERT model: configuration, encoder and task models (Flax NNX).

    from bert_jax.model import BertConfig, BertForPreTraining, preset
    model = BertForPreTraining(preset("base"), rngs=nnx.Rngs(0))

Modules: `config` (BertConfig, size presets), `encoder` (embeddings, post-LN
blocks, pooler: BertModel), `task_models` (BertForPreTraining and the
fine-tuning models, each holding the encoder as `.bert`). Imports nothing from
the rest of bert_jax.
"""
from bert_jax.model.config import ACTIVATIONS, PRESETS, BertConfig, preset
from bert_jax.model.encoder import BertModel, BertOutput
from bert_jax.model.task_models import (
                                        BertForMultipleChoice,
                                        BertForPreTraining,
                                        BertForQuestionAnswering,
                                        BertForSequenceClassification,
                                        BertForTokenClassification,
                                        PreTrainingOutput,
)

__all__ = [
    "ACTIVATIONS", "PRESETS", "BertConfig", "BertForMultipleChoice", "BertForPreTraining",
    "BertForQuestionAnswering", "BertForSequenceClassification", "BertForTokenClassification",
    "BertModel", "BertOutput", "PreTrainingOutput", "preset",
]
