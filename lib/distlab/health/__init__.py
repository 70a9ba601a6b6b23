"""Is my box healthy? A user's nccl-tests log judged against what NCCL should do on that box.

``python -m distlab.health LOG`` (:mod:`.__main__`): the log read (:mod:`distlab.logs`), the box
set up from what it states and the flags (:mod:`.setup`), every size priced by the NCCL model
(:mod:`.expected`), judged against a band of the model's own held-out error (:mod:`.bands`,
:mod:`.verdict`), and the shortfall's cause named with the rerun that would confirm it
(:mod:`.diagnose`).

Floor: beside ``judge`` (it reads the model's evidence for its bands).
"""
