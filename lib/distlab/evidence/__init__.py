"""Evidence apart from models: each model's published data, the code that fits its constants on
them and the code that judges it there.

One sub-package per model: :mod:`distlab.evidence.plan` (published training runs, dense and
mixture-of-experts, the compute rate's fit, the planner's judgement),
:mod:`distlab.evidence.nccl` (published nccl-tests tables, the execution constants' fit, the
judgement per table and per box, all-to-all's), :mod:`distlab.evidence.rccl` (published
rccl-tests tables, the execution constants' fit, the judgement and the box inventory), and
:mod:`distlab.evidence.judge`, the one leave-one-out judge NCCL and RCCL share.

The rule (``tests/test_import_graph.py``): evidence imports the models; the models never import
evidence (their fitted constants are committed in the model or its JSON, and a test refits them
here and compares); only :mod:`distlab.judge`, :mod:`distlab.viz`, the profile's reader of the
published tables, the notebooks, the tests and the tools import it. A model's command line
(``python -m distlab.nccl --judge``) reaches it through its ``__main__``, which nothing
imports.
"""
