"""The Ouro model in torch: presets, random or checkpoint weights, prelude/recurrent/coda."""

from engine.model.alloc import default_dtype, empty_model
from engine.model.build import build_model, init_random_weights
from engine.model.config import OuroConfig
from engine.model.lookahead import LookaheadHead
from engine.model.ouro import OuroForCausalLM
from engine.model.presets import PRESETS, get_preset

__all__ = [
    "PRESETS",
    "LookaheadHead",
    "OuroConfig",
    "OuroForCausalLM",
    "build_model",
    "default_dtype",
    "empty_model",
    "get_preset",
    "init_random_weights",
]
