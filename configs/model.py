"""Model presets as ml_collections, for use inside other configs.

    from configs import model as model_config
    config.model = model_config.get_config("base")

Presets (google-research/bert's sizes): tiny (2 layers, hidden 128, 2 heads),
mini (4/256/4), small (4/512/8), medium (8/512/8), base (12/768/12),
large (24/1024/16). The fields are those of bert_jax.model_config.BertConfig.
"""
import ml_collections

from bert_jax.model.config import preset


def get_config(arg: str = "base") -> ml_collections.ConfigDict:
    """The BertConfig fields of preset `arg` as a ConfigDict."""
    return ml_collections.ConfigDict(preset(arg).to_dict())
