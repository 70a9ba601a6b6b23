"""The old path of :mod:`distlab.loading` (the data-loading lab, renamed so that it no longer
reads like pipeline parallelism, :mod:`distlab.pipeline_parallel`), kept for one release.

``import distlab.pipeline`` warns once (DeprecationWarning) and gives the module
:mod:`distlab.loading` itself; ``distlab.pipeline.X`` gives the module ``distlab.loading.X``
itself, so classes, ``isinstance`` and pickles are those of :mod:`distlab.loading` (a class
pickled by a process executor is named under ``distlab.loading``; a pickle that names
``distlab.pipeline.X`` still loads).
"""

from distlab._renamed import same_module

same_module(__name__, "distlab.loading", "pipeline parallelism is distlab.pipeline_parallel")
