"""The real libtorch C++ samplers, compiled against the installed torch, as a reference.

    from helpers.libtorch_compiled import load_reference   # tests (tests/ on sys.path)
    ref = load_reference()                 # compiles once (about a minute), then cached
    ref.random_epochs(10, 4, 1, True, [0, 1], 3)   # batches of DistributedRandomSampler

This builds one small extension with ``torch.utils.cpp_extension.load_inline`` that links the
``torch::data::samplers::DistributedRandomSampler`` / ``DistributedSequentialSampler`` compiled into
the torch wheel (so the ``std::shuffle`` that runs is the one the wheel was built with) and a plain
``std::mt19937``. The build folder lives under the system temp folder, named by a hash of the source
and the torch version, so later calls (and later test runs) only load it. It needs a C++ compiler
and ninja; tests and ``tools/make_sampler_golden.py`` use it, the library does not, so it lives
in ``tests/helpers/`` and is not installed with distlab.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from types import ModuleType

__all__ = ["CPP_SOURCE", "load_reference", "build_directory"]

CPP_SOURCE = r"""
#include <torch/data/samplers/distributed.h>
#include <torch/serialize/archive.h>
#include <random>
#include <sstream>
#include <vector>

using torch::data::samplers::DistributedRandomSampler;
using torch::data::samplers::DistributedSequentialSampler;
using Batches = std::vector<std::vector<size_t>>;

template <typename S>
static Batches drain(S& s, size_t batch_size) {
  Batches out;
  while (auto b = s.next(batch_size)) out.push_back(*b);
  return out;
}

// For each epoch: set_epoch(e); reset(); then every batch of next(batch_size).
std::vector<Batches> random_epochs(size_t size, size_t replicas, size_t rank, bool dup,
                                   std::vector<size_t> epochs, size_t batch_size) {
  DistributedRandomSampler s(size, replicas, rank, dup);
  std::vector<Batches> out;
  for (size_t e : epochs) {
    s.set_epoch(e);
    s.reset();
    out.push_back(drain(s, batch_size));
  }
  return out;
}

// The batches right after construction (epoch 0, shuffled by the constructor).
Batches random_initial(size_t size, size_t replicas, size_t rank, bool dup, size_t batch_size) {
  DistributedRandomSampler s(size, replicas, rank, dup);
  return drain(s, batch_size);
}

// set_epoch(epoch), reset(new_size) for each size in turn; batches after each reset.
std::vector<Batches> random_resets(size_t size, size_t replicas, size_t rank, bool dup,
                                   size_t epoch, std::vector<size_t> sizes, size_t batch_size) {
  DistributedRandomSampler s(size, replicas, rank, dup);
  s.set_epoch(epoch);
  std::vector<Batches> out;
  for (size_t n : sizes) {
    s.reset(n);
    out.push_back(drain(s, batch_size));
  }
  return out;
}

// Take `taken` batches at `epoch`, save, load into a fresh sampler, return
// (index after load, the saved epoch, remaining batches).
std::tuple<size_t, size_t, Batches> random_resume(size_t size, size_t replicas, size_t rank,
                                                  bool dup, size_t epoch, size_t taken,
                                                  size_t batch_size) {
  DistributedRandomSampler a(size, replicas, rank, dup);
  a.set_epoch(epoch);
  a.reset();
  for (size_t i = 0; i < taken; ++i) a.next(batch_size);
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream os;
  out.save_to(os);
  std::istringstream is(os.str());
  torch::serialize::InputArchive in;
  in.load_from(is);
  DistributedRandomSampler b(size, replicas, rank, dup);
  b.load(in);
  return {b.index(), b.epoch(), drain(b, batch_size)};
}

Batches sequential_batches(size_t size, size_t replicas, size_t rank, bool dup,
                           size_t batch_size, size_t new_size) {
  DistributedSequentialSampler s(size, replicas, rank, dup);
  Batches out = drain(s, batch_size);
  s.reset(new_size);
  Batches again = drain(s, batch_size);
  out.push_back({});  // separator between the two passes
  out.insert(out.end(), again.begin(), again.end());
  return out;
}

std::vector<uint32_t> mt19937_raw(size_t seed, size_t count) {
  std::mt19937 g(seed);
  std::vector<uint32_t> out(count);
  for (auto& v : out) v = static_cast<uint32_t>(g());
  return out;
}

std::vector<size_t> shuffle_iota(size_t n, size_t seed) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  std::mt19937 g(seed);
  std::shuffle(v.begin(), v.end(), g);
  return v;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("random_epochs", &random_epochs);
  m.def("random_initial", &random_initial);
  m.def("random_resets", &random_resets);
  m.def("random_resume", &random_resume);
  m.def("sequential_batches", &sequential_batches);
  m.def("mt19937_raw", &mt19937_raw);
  m.def("shuffle_iota", &shuffle_iota);
}
"""

_loaded: ModuleType | None = None


def _tag() -> str:
    import torch

    digest = hashlib.sha256((CPP_SOURCE + torch.__version__).encode()).hexdigest()[:12]
    return f"distlab_libtorch_samplers_{digest}"


def build_directory() -> str:
    """Where the extension is built and cached: ``<tempdir>/<name with source hash>``."""
    return os.path.join(tempfile.gettempdir(), _tag())


def load_reference(verbose: bool = False) -> ModuleType:
    """Compile (first call) or load (later calls) the reference extension; returns the module.

    Raises:
        Whatever ``torch.utils.cpp_extension.load_inline`` raises when there is no working
        compiler or the build fails (callers that need the reference should let it propagate).
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    from torch.utils.cpp_extension import load_inline

    path = build_directory()
    os.makedirs(path, exist_ok=True)
    _loaded = load_inline(name=_tag(), cpp_sources=[CPP_SOURCE], functions=None,
                          build_directory=path, extra_cflags=["-O1"], verbose=verbose)
    return _loaded
