"""Heads over the shared BERT encoder: pretraining (MLM + NSP) and tasks.

Each model owns the encoder as `self.bert`, so a fine-tuning model loads the
encoder weights of any pretraining checkpoint under the same paths.
"""
from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel, Dense, activation, new_layer_norm, new_param


def gather_positions(sequence: jax.Array, positions: jax.Array) -> jax.Array:
    """[batch, length, embed] x int [batch, num] -> [batch, num, embed]."""
    return jnp.take_along_axis(sequence, positions[:, :, None].astype(jnp.int32), axis=1)


class MaskedLMHead(nnx.Module):
    """dense + activation + LayerNorm, then logits tied to the word embeddings.

    As google-research/bert, the transform runs only on the gathered masked
    positions: with 20 of 128 positions that saves most of the vocab matmul.
    """

    def __init__(self, config: BertConfig, rngs: nnx.Rngs):
        h = config.hidden_size
        self.transform = Dense((h,), (h,), kernel_axes=("embed", None), bias_axes=(None,),
                               config=config, rngs=rngs)
        self.layer_norm = new_layer_norm(config, rngs)
        self.output_bias = new_param(rngs, jax.nn.initializers.zeros, (config.vocab_size,),
                                  ("vocab",), config.param_dtype)
        self.act = activation(config.hidden_act)
        self.dtype = jnp.dtype(config.dtype)

    def __call__(self, hidden: jax.Array, word_embeddings: jax.Array) -> jax.Array:
        # hidden: [batch, num, embed]; word_embeddings: [vocab, embed].
        h = self.layer_norm(self.act(self.transform(hidden)))
        logits = jnp.einsum("bne,ve->bnv", h, word_embeddings.astype(self.dtype))
        return logits + self.output_bias[...].astype(self.dtype)  # [batch, num, vocab]


@flax.struct.dataclass
class PreTrainingOutput:
    """mlm_logits [batch, num_predictions, vocab]; nsp_logits [batch, 2]."""
    mlm_logits: jax.Array
    nsp_logits: jax.Array


class BertForPreTraining(nnx.Module):
    """The encoder with the masked-LM and next-sentence heads."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.mlm_head = MaskedLMHead(config, rngs)
        self.nsp_head = Dense((config.hidden_size,), (2,), kernel_axes=("embed", None),
                              bias_axes=(None,), config=config, rngs=rngs)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None,
                 masked_lm_positions=None, position_ids=None, *, deterministic=True,
                 rngs=None) -> PreTrainingOutput:
        """MLM logits at `masked_lm_positions` [batch, num] (every position if None)."""
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                        deterministic=deterministic, rngs=rngs)
        hidden = out.sequence_output
        if masked_lm_positions is not None:
            hidden = gather_positions(hidden, masked_lm_positions)
        table = self.bert.embeddings.word_embeddings.embedding[...]
        return PreTrainingOutput(mlm_logits=self.mlm_head(hidden, table),
                                 nsp_logits=self.nsp_head(out.pooled_output))


class _DropoutDenseHead(nnx.Module):
    """The encoder, dropout and a dense layer to `num_outputs`: the shape of
    google-research/bert's classifier heads. Subclasses pick what it reads."""

    def __init__(self, config: BertConfig, num_outputs: int, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.dropout = nnx.Dropout(config.hidden_dropout_prob)
        self.classifier = Dense((config.hidden_size,), (num_outputs,), kernel_axes=("embed", None),
                                bias_axes=(None,), config=config, rngs=rngs)

    def _head(self, features, deterministic, rngs):
        return self.classifier(self.dropout(features, deterministic=deterministic, rngs=rngs))


class BertForSequenceClassification(_DropoutDenseHead):
    """GLUE-style head on the pooled output: num_labels=1 means regression."""

    def __init__(self, config: BertConfig, num_labels: int, *, rngs: nnx.Rngs):
        super().__init__(config, num_labels, rngs)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, position_ids=None,
                 cls_positions=None, *, deterministic=True, rngs=None) -> jax.Array:
        """Logits [batch, num_labels], or [num_examples, num_labels] for packed rows.

        Packed rows hold several examples each: `attention_mask` is then a
        block-diagonal [batch, length, length] mask, `position_ids` restart at
        each example, and `cls_positions` int [num_examples] are the flat
        indices (row * length + offset) of each example's [CLS] token, whose
        pooled output is classified.
        """
        out = self.bert(input_ids, token_type_ids, attention_mask, position_ids,
                        deterministic=deterministic, rngs=rngs)
        pooled = out.pooled_output
        if cls_positions is not None:
            flat = out.sequence_output.reshape(-1, out.sequence_output.shape[-1])
            pooled = self.bert.pool(flat[cls_positions])  # [num_examples, embed]
        return self._head(pooled, deterministic, rngs)


class BertForQuestionAnswering(nnx.Module):
    """SQuAD span head: start and end logits per token."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.bert = BertModel(config, rngs=rngs)
        self.qa_outputs = Dense((config.hidden_size,), (2,), kernel_axes=("embed", None),
                                bias_axes=(None,), config=config, rngs=rngs)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 deterministic=True, rngs=None) -> tuple[jax.Array, jax.Array]:
        """(start_logits, end_logits), each [batch, length]."""
        sequence = self.bert(input_ids, token_type_ids, attention_mask,
                             deterministic=deterministic, rngs=rngs).sequence_output
        logits = self.qa_outputs(sequence)  # [batch, length, 2]
        return logits[..., 0], logits[..., 1]


class BertForTokenClassification(_DropoutDenseHead):
    """A label per token (NER): dropout + dense on the sequence output."""

    def __init__(self, config: BertConfig, num_labels: int, *, rngs: nnx.Rngs):
        super().__init__(config, num_labels, rngs)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 deterministic=True, rngs=None) -> jax.Array:
        """Logits [batch, length, num_labels]."""
        sequence = self.bert(input_ids, token_type_ids, attention_mask,
                             deterministic=deterministic, rngs=rngs).sequence_output
        return self._head(sequence, deterministic, rngs)


class BertForMultipleChoice(_DropoutDenseHead):
    """Scores each of C choices from its pooled output (SWAG style)."""

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, 1, rngs)

    def __call__(self, input_ids, token_type_ids=None, attention_mask=None, *,
                 deterministic=True, rngs=None) -> jax.Array:
        """int [batch, choices, length] inputs -> logits [batch, choices]."""
        batch, choices, length = input_ids.shape

        def flat(x):
            return None if x is None else x.reshape(batch * choices, length)

        pooled = self.bert(flat(input_ids), flat(token_type_ids), flat(attention_mask),
                           deterministic=deterministic, rngs=rngs).pooled_output
        return self._head(pooled, deterministic, rngs).reshape(batch, choices)
