"""The planner's name for :mod:`distlab.transformer`, where :class:`ModelSpec` is defined.

A transformer's description is not the planner's own: tensor parallelism's cost and memory
(floor 1) read it too, so it lives on the core floor. ``from distlab.plan.model import
ModelSpec`` keeps working; new code imports from :mod:`distlab.transformer`.
"""

from __future__ import annotations

from distlab.transformer import (
    NORMS,
    PRESETS,
    Linear,
    ModelSpec,
    layer_linears,
    layer_matmul_flops,
    model_spec,
    per_op_saved_linears,
    spec_from_module,
)

__all__ = ["NORMS", "PRESETS", "Linear", "ModelSpec", "layer_linears", "layer_matmul_flops",
           "model_spec", "per_op_saved_linears", "spec_from_module"]
