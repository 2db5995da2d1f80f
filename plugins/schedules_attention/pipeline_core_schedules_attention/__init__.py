"""pipeline-core plugin: a FlashAttention-3-style forward on the H100 (``flash-attention-fwd``)."""
from __future__ import annotations

from pipeline_core.plugin_api import installed_version

from pipeline_core_schedules_attention.call import AttentionArgumentError, attention
from pipeline_core_schedules_attention.decode_call import append_kv_cache, attention_decode
from pipeline_core_schedules_attention.schedule import (AttentionGeometry, AttentionTag,
                                                        FlashAttentionForward,
                                                        attention_cost_model, attention_profile,
                                                        make_attention)
from pipeline_core_schedules_attention.varlen_call import attention_varlen

#: pyproject.toml is the one source
__version__ = installed_version("pipeline-core-schedules-attention")
__all__ = ["AttentionArgumentError", "AttentionGeometry", "AttentionTag",
           "FlashAttentionForward", "append_kv_cache", "attention", "attention_cost_model",
           "attention_decode", "attention_profile", "attention_varlen",
           "make_attention"]
