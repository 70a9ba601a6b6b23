// distlab's compiled plan executor: one rank's steps of a collective plan in one C++ call.
//
// It runs the same RankPlan the Python executor (distlab/collectives/runtime/steps.py) reads,
// encoded as int64s by distlab/collectives/runtime/compiled.py (the layout is described there),
// with the same order of operations, so both give bitwise-equal results:
//
//   gloo ("posted ahead"): the receives of the next step are posted while the current step is
//   in flight (a "deferred" one, landing in place in elements the current step sends, once the
//   current step's sends have finished), every receive of a step before any of its sends; each
//   received message is applied as it lands (reduced into the tensor or copied), after this
//   rank's own sends that read the same elements have completed.
//   NCCL ("batched"): each step's receives and sends are posted as one coalesced group
//   (startCoalescing/endCoalescing on CUDA, what batch_isend_irecv does), then applied.
//
// Point-to-point goes straight to the process group's backend (c10d::Backend::send/recv);
// reductions are ATen ops on the tensor's device (add_, mul_, maximum/minimum with out=, and
// their three-operand forms for a read-only source), on the current stream after each wait.
// The GIL is released for the whole call. A failing step throws
// "distlab-step:<index>:<message>" so the caller can name the step.

// torch/python.h (pybind11 with torch's type casters) and ATen, not torch/extension.h: that one
// includes all of libtorch's C++ frontend (autograd, nn, optim) and a build spent a third of its
// 32 CPU-seconds parsing it (22 s without).
#include <ATen/ATen.h>
#include <torch/python.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Range {
  int64_t start, stop;
  bool reduce;       // "reduce" (else "copy")
  bool from_source;  // send: read from the source; received reduce: op(source, incoming)
};

struct Message {
  int64_t peer, tag, offset;  // offset < 0: a one-range message read/received in place
  bool deferred;              // a receive in place posted after the previous step's sends
  int64_t count;
  std::vector<Range> ranges;
};

struct Step {
  int64_t index, sends_first_needed;
  std::vector<std::pair<int64_t, int64_t>> fill;
  std::vector<Message> sends, recvs;
};

enum Op : int64_t { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };

using WorkPtr = c10::intrusive_ptr<c10d::Work>;

class Cursor {
 public:
  Cursor(const int64_t* data, int64_t n) : data_(data), n_(n) {}
  int64_t next() {
    if (pos_ >= n_) throw std::invalid_argument("distlab: truncated plan encoding");
    return data_[pos_++];
  }
  bool done() const { return pos_ == n_; }

 private:
  const int64_t* data_;
  int64_t n_, pos_ = 0;
};

Message read_message(Cursor& c) {
  Message m;
  m.peer = c.next();
  m.tag = c.next();
  m.offset = c.next();
  m.deferred = m.offset == -2;
  if (m.deferred) m.offset = -1;
  int64_t nranges = c.next();
  m.count = 0;
  for (int64_t i = 0; i < nranges; ++i) {
    Range r;
    r.start = c.next();
    r.stop = c.next();
    r.reduce = c.next() != 0;
    r.from_source = c.next() != 0;
    m.count += r.stop - r.start;
    m.ranges.push_back(r);
  }
  return m;
}

class CompiledPlan {
 public:
  // ``encoded``: a 1-D int64 CPU tensor (see compiled.py for the layout).
  explicit CompiledPlan(const at::Tensor& encoded) {
    TORCH_CHECK(encoded.dim() == 1 && encoded.scalar_type() == at::kLong && !encoded.is_cuda(),
                "distlab: the plan encoding must be a 1-D int64 CPU tensor");
    auto contiguous = encoded.contiguous();
    Cursor c(contiguous.data_ptr<int64_t>(), contiguous.numel());
    int64_t nsteps = c.next();
    scratch_ = c.next();
    for (int64_t s = 0; s < nsteps; ++s) {
      Step st;
      st.index = c.next();
      st.sends_first_needed = c.next();
      int64_t nfill = c.next(), nsends = c.next(), nrecvs = c.next();
      for (int64_t i = 0; i < nfill; ++i) {
        int64_t a = c.next();
        st.fill.emplace_back(a, c.next());
      }
      for (int64_t i = 0; i < nsends; ++i) st.sends.push_back(read_message(c));
      for (int64_t i = 0; i < nrecvs; ++i) st.recvs.push_back(read_message(c));
      steps_.push_back(std::move(st));
    }
    TORCH_CHECK(c.done(), "distlab: trailing data after the plan encoding");
  }

  int64_t num_steps() const { return static_cast<int64_t>(steps_.size()); }
  int64_t scratch() const { return scratch_; }

  // Runs every step. ``source`` (possibly undefined) holds elements [source_at, ...) until
  // written; ``check_mine`` / ``check_theirs`` (undefined when the inline check is off) are
  // this rank's description and the (world, bytes) table every peer's lands in. Returns
  // false when the inline check found a mismatch (nothing after step 0's posting ran).
  bool run(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, at::Tensor flat,
           at::Tensor scratch, c10::optional<at::Tensor> source, int64_t source_at, int64_t op,
           int64_t tag_base, int64_t timeout_ms, bool batched,
           c10::optional<at::Tensor> check_mine, c10::optional<at::Tensor> check_theirs,
           int64_t check_tag) {
    pybind11::gil_scoped_release no_gil;
    Runner r{this, pg->getBackend(flat.device().type()), pg->getRank(), pg->getSize(),
             std::move(flat), std::move(scratch), source.has_value() ? *source : at::Tensor(),
             source_at, op, tag_base, std::chrono::milliseconds(timeout_ms)};
    if (batched) {
      r.run_batched();
      return true;
    }
    return r.run_posted_ahead(check_mine.has_value() ? *check_mine : at::Tensor(),
                              check_theirs.has_value() ? *check_theirs : at::Tensor(),
                              check_tag);
  }

 private:
  struct Runner {
    const CompiledPlan* plan;
    c10::intrusive_ptr<c10d::Backend> backend;
    int rank, world;
    at::Tensor flat, scratch, source;
    int64_t source_at, op, tag_base;
    std::chrono::milliseconds timeout;

    at::Tensor read(int64_t a, int64_t b, bool from_source) const {
      if (from_source) return source.narrow(0, a - source_at, b - a);
      return flat.narrow(0, a, b - a);
    }

    void wait(const WorkPtr& w) const { w->wait(timeout); }

    void fill(const Step& st) const {
      for (const auto& [a, b] : st.fill) flat.narrow(0, a, b - a).copy_(read(a, b, true));
    }

    std::vector<at::Tensor> send_buffers(const Step& st) const {
      std::vector<at::Tensor> out;
      out.reserve(st.sends.size());
      for (const auto& m : st.sends) {
        if (m.offset < 0) {
          const Range& r = m.ranges.front();
          out.push_back(read(r.start, r.stop, r.from_source));
          continue;
        }
        at::Tensor stage = scratch.narrow(0, m.offset, m.count);
        std::vector<at::Tensor> parts;
        parts.reserve(m.ranges.size());
        for (const auto& r : m.ranges) parts.push_back(read(r.start, r.stop, r.from_source));
        at::cat_out(stage, parts, 0);
        out.push_back(stage);
      }
      return out;
    }

    std::vector<at::Tensor> recv_buffers(const Step& st) const {
      std::vector<at::Tensor> out;
      out.reserve(st.recvs.size());
      for (const auto& m : st.recvs) {
        if (m.offset < 0) {
          const Range& r = m.ranges.front();
          out.push_back(flat.narrow(0, r.start, r.stop - r.start));
        } else {
          out.push_back(scratch.narrow(0, m.offset, m.count));
        }
      }
      return out;
    }

    WorkPtr post_recv(at::Tensor buf, int64_t peer, int64_t tag) const {
      std::vector<at::Tensor> v{std::move(buf)};
      return backend->recv(v, static_cast<int>(peer), static_cast<int>(tag));
    }

    WorkPtr post_send(at::Tensor buf, int64_t peer, int64_t tag) const {
      std::vector<at::Tensor> v{std::move(buf)};
      return backend->send(v, static_cast<int>(peer), static_cast<int>(tag));
    }

    void reduce_into(at::Tensor out, const at::Tensor& x) const {
      switch (op) {
        case kSum: out.add_(x); break;
        case kProd: out.mul_(x); break;
        case kMax: at::maximum_out(out, out, x); break;
        default: at::minimum_out(out, out, x); break;
      }
    }

    void reduce_out(at::Tensor out, const at::Tensor& a, const at::Tensor& b) const {
      switch (op) {
        case kSum: at::add_out(out, a, b); break;
        case kProd: at::mul_out(out, a, b); break;
        case kMax: at::maximum_out(out, a, b); break;
        default: at::minimum_out(out, a, b); break;
      }
    }

    void apply(const Message& m, const at::Tensor& buf) const {
      if (m.offset < 0) return;  // a copy received in place
      int64_t pos = 0;
      for (const auto& r : m.ranges) {
        int64_t n = r.stop - r.start;
        at::Tensor piece = buf.narrow(0, pos, n);
        pos += n;
        at::Tensor dst = flat.narrow(0, r.start, n);
        if (!r.reduce) {
          dst.copy_(piece);
        } else if (r.from_source) {
          reduce_out(dst, read(r.start, r.stop, true), piece);
        } else {
          reduce_into(dst, piece);
        }
      }
    }

    void complete(const Step& st, const std::vector<at::Tensor>& bufs,
                  const std::vector<WorkPtr>& recv_works,
                  const std::vector<WorkPtr>& send_works) const {
      bool sends_done = false;
      for (size_t i = 0; i < st.recvs.size(); ++i) {
        wait(recv_works[i]);
        if (static_cast<int64_t>(i) >= st.sends_first_needed && !sends_done) {
          for (const auto& w : send_works) wait(w);  // our own send still reads these
          sends_done = true;
        }
        apply(st.recvs[i], bufs[i]);
      }
      if (!sends_done) {
        for (const auto& w : send_works) wait(w);
      }
    }

    struct Posted {
      std::vector<at::Tensor> bufs;
      std::vector<WorkPtr> works;
    };

    // Posts the step's receives that are (deferred) or are not (!deferred) deferred into p,
    // whose buffers and works are laid out on the first call.
    void post_recvs(const Step& st, bool deferred, Posted& p) const {
      if (p.bufs.empty()) {
        p.bufs = recv_buffers(st);
        p.works.assign(st.recvs.size(), WorkPtr());
      }
      for (size_t i = 0; i < st.recvs.size(); ++i) {
        const auto& m = st.recvs[i];
        if (m.deferred == deferred) p.works[i] = post_recv(p.bufs[i], m.peer, tag_base | m.tag);
      }
    }

    Posted post_recvs(const Step& st) const {
      Posted p;
      post_recvs(st, false, p);
      post_recvs(st, true, p);
      return p;
    }

    static bool any_deferred(const Step& st) {
      for (const auto& m : st.recvs) {
        if (m.deferred) return true;
      }
      return false;
    }

    std::vector<WorkPtr> post_sends(const Step& st) const {
      fill(st);
      auto bufs = send_buffers(st);
      std::vector<WorkPtr> works;
      works.reserve(bufs.size());
      for (size_t i = 0; i < bufs.size(); ++i) {
        const auto& m = st.sends[i];
        works.push_back(post_send(bufs[i], m.peer, tag_base | m.tag));
      }
      return works;
    }

    [[noreturn]] static void fail(int64_t index, const std::exception& e) {
      throw std::runtime_error("distlab-step:" + std::to_string(index) + ":" + e.what());
    }

    bool run_posted_ahead(at::Tensor mine, at::Tensor theirs, int64_t check_tag) {
      const auto& steps = plan->steps_;
      std::vector<WorkPtr> check_recvs, check_sends;
      bool checking = mine.defined() && world > 1;
      if (checking) {
        try {  // the descriptions travel with step 0 (peercheck.InlineCheck's order)
          for (int q = 0; q < world; ++q) {
            if (q != rank) check_recvs.push_back(post_recv(theirs[q], q, check_tag));
          }
          for (int q = 0; q < world; ++q) {
            if (q != rank) check_sends.push_back(post_send(mine, q, check_tag));
          }
        } catch (const std::exception& e) {
          fail(-1, e);
        }
      }
      auto verify = [&]() -> bool {
        if (!checking) return true;
        checking = false;
        try {
          for (const auto& w : check_recvs) wait(w);
        } catch (const std::exception& e) {
          fail(-1, e);
        }
        theirs[rank].copy_(mine);
        return theirs.eq(mine.unsqueeze(0)).all().item<bool>();
      };
      Posted recv;
      if (!steps.empty()) {
        try {
          recv = post_recvs(steps[0]);
        } catch (const std::exception& e) {
          fail(steps[0].index, e);
        }
      }
      for (size_t i = 0; i < steps.size(); ++i) {
        const Step& st = steps[i];
        std::vector<WorkPtr> sends;
        Posted next;
        const Step* next_step = i + 1 < steps.size() ? &steps[i + 1] : nullptr;
        try {  // posting can fail too: a peer that already left closed the connection
          sends = post_sends(st);
          if (next_step) post_recvs(*next_step, false, next);
        } catch (const std::exception& e) {
          fail(st.index, e);
        }
        if (!verify()) return false;
        try {
          complete(st, recv.bufs, recv.works, sends);
        } catch (const std::exception& e) {
          fail(st.index, e);
        }
        if (next_step && any_deferred(*next_step)) {
          try {  // this step's sends have finished: nothing reads those elements now
            post_recvs(*next_step, true, next);
          } catch (const std::exception& e) {
            fail(next_step->index, e);
          }
        }
        recv = std::move(next);
      }
      if (!verify()) return false;  // a rank with no step of its own still checks
      try {
        for (const auto& w : check_sends) wait(w);
      } catch (const std::exception& e) {
        fail(-2, e);
      }
      return true;
    }

    void run_batched() {
      bool coalesce = flat.is_cuda();  // NCCL: one group per step; gloo has no coalescing
      for (const Step& st : plan->steps_) {
        try {
          fill(st);
          auto rbufs = recv_buffers(st);
          auto sbufs = send_buffers(st);
          std::vector<WorkPtr> recv_works, send_works;
          if (coalesce) backend->startCoalescing();
          for (size_t i = 0; i < rbufs.size(); ++i) {
            recv_works.push_back(post_recv(rbufs[i], st.recvs[i].peer,
                                           tag_base | st.recvs[i].tag));
          }
          for (size_t i = 0; i < sbufs.size(); ++i) {
            send_works.push_back(post_send(sbufs[i], st.sends[i].peer,
                                           tag_base | st.sends[i].tag));
          }
          if (coalesce) {
            WorkPtr all = backend->endCoalescing();
            if (all) {  // one work for the whole group: wait it for everything
              recv_works.assign(rbufs.size(), all);
              send_works.assign(1, all);
            }
          }
          complete(st, rbufs, recv_works, send_works);
        } catch (const std::exception& e) {
          fail(st.index, e);
        }
      }
    }
  };

  std::vector<Step> steps_;
  int64_t scratch_ = 0;
};

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "distlab's compiled collective-plan executor (see plan_executor.cpp)";
  pybind11::class_<CompiledPlan>(m, "CompiledPlan")
      .def(pybind11::init<const at::Tensor&>(), pybind11::arg("encoded"))
      .def_property_readonly("num_steps", &CompiledPlan::num_steps)
      .def_property_readonly("scratch", &CompiledPlan::scratch)
      .def("run", &CompiledPlan::run, pybind11::arg("pg"), pybind11::arg("flat"),
           pybind11::arg("scratch"), pybind11::arg("source"), pybind11::arg("source_at"),
           pybind11::arg("op"), pybind11::arg("tag_base"), pybind11::arg("timeout_ms"),
           pybind11::arg("batched"), pybind11::arg("check_mine"),
           pybind11::arg("check_theirs"), pybind11::arg("check_tag"));
}
