"""RCCL's evidence: the published rccl-tests tables, the execution constants fitted on them and
the model judged there (:mod:`.judged`), and the boxes and NICs with how the tables judge each
(:mod:`.inventory`). The model, :mod:`distlab.rccl`, reads only its committed constants."""
