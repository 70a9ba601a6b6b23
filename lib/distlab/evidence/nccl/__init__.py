"""NCCL's evidence: the published nccl-tests tables (:mod:`.published`, :mod:`.alltoall_judged`'s
all-to-all tables), the execution constants fitted on them and judged leave-one-source-out
(:mod:`.fit_execution`), the judgement's text (:mod:`.judged`) and the inventory of every box,
network and release with how the tables judge it (:mod:`.inventory`). The model,
:mod:`distlab.nccl`, reads only the constants committed beside it."""
