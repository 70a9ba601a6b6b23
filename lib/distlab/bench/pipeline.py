"""The old path of :mod:`distlab.bench.loading` (the data-loading benchmark, renamed beside
:mod:`distlab.loading`), kept for one release: importing it warns once (DeprecationWarning) and
gives the module :mod:`distlab.bench.loading` itself. The command ``python -m distlab.bench
pipeline`` still runs it, as ``python -m distlab.bench loading``."""

from distlab._renamed import same_module

same_module(__name__, "distlab.bench.loading",
            "the data-loading lab is distlab.loading; pipeline parallelism's benchmark is "
            "distlab.bench.pipeline_parallel")
