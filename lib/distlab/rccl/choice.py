"""The former name of :mod:`distlab.rccl.tuning` (RCCL's own tuning model: its choice per size,
named as NCCL's is), kept so that code importing it runs unchanged: importing this module gives
that module itself (the same object, its names and state), not a copy."""

import sys

from distlab.rccl import tuning as _module

sys.modules[__name__] = _module
