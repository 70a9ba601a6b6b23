"""The planner: memory per GPU and step time of every data / ZeRO / tensor / pipeline /
context-parallel layout of a decoder transformer on named GPUs, judged on published runs.

``python -m distlab.plan`` is the command; from Python, :func:`price` one layout or
:func:`plan` them all (:mod:`distlab.plan.planner`), a model from :data:`PRESETS`, a dict or
an ``nn.Module`` (:mod:`distlab.plan.model`), a :class:`Layout` and :func:`hardware`
(:mod:`distlab.plan.layout`).
"""

from distlab.plan.layout import GPU_KINDS, PRECISIONS, Hardware, Layout, hardware, parse_layout
from distlab.plan.model import PRESETS, ModelSpec, model_spec, spec_from_module

__all__ = ["GPU_KINDS", "PRECISIONS", "PRESETS", "Hardware", "Layout", "ModelSpec", "hardware",
           "model_spec", "parse_layout", "spec_from_module"]
