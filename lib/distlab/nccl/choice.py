"""The former name of :mod:`distlab.nccl.lines` (the per-size table as printed lines and JSON,
named as RCCL's is), kept so that code importing it runs unchanged: importing this module gives
that module itself (the same object, its names and state), not a copy."""

import sys

from distlab.nccl import lines as _module

sys.modules[__name__] = _module
