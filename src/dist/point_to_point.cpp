// send / recv / isend / irecv: Python tensordict's point-to-point protocol.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <future>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/tree.h"
#include "core/write_plan.h"
#include "dist/group.h"

namespace tensordict {
namespace detail {

std::vector<WireLeaf> wire_leaves(const TensorDictImpl& root) {
  struct Item {
    c10::SmallVector<const std::string*, 8> path;
    const at::Tensor* tensor;
    const TensorDictImpl* level;
    size_t index;
  };
  std::vector<Item> items;
  std::vector<const TensorDictImpl*> levels;
  visit(
      root,
      [&](const KeyPath&, const TensorDictImpl& level) {
        levels.push_back(&level);
      },
      [&](const KeyPath& path, const at::Tensor& t) {
        items.push_back({path.parts, &t, levels.back(), items.size()});
      },
      [&](const KeyPath&, const TensorDictImpl&) { levels.pop_back(); });
  // Sorting the key paths component by component is Python's order: a
  // level's keys sorted, a sub-dict's leaves in place of its key.
  std::stable_sort(
      items.begin(), items.end(), [](const Item& a, const Item& b) {
        return std::lexicographical_compare(
            a.path.begin(), a.path.end(), b.path.begin(), b.path.end(),
            [](const std::string* x, const std::string* y) { return *x < *y; });
      });
  std::vector<WireLeaf> out;
  out.reserve(items.size());
  for (const Item& it : items) {
    std::vector<std::string> parts;
    parts.reserve(it.path.size());
    for (const std::string* p : it.path) parts.push_back(*p);
    out.push_back(
        {NestedKey(std::move(parts)), *it.tensor, it.level, it.index});
  }
  return out;
}

void check_peer(const char* op, const char* what, int rank, const Group& pg) {
  const int size = pg.size();
  TORCH_CHECK_VALUE(rank >= 0 && rank < size, op, ": ", what, " rank ", rank,
                    " is out of range for a group of size ", size);
  TORCH_CHECK_VALUE(rank != pg.rank(), op, ": ", what, " rank ", rank,
                    " is this process");
}

void check_wire_leaf(const char* op, const WireLeaf& leaf,
                     const std::string& backend) {
  const at::Tensor& t = leaf.tensor;
  TORCH_CHECK_VALUE(t.layout() == at::kStrided && !t.is_quantized(), op,
                    ": key ", leaf.key.str(),
                    ": only dense (strided) tensors can be sent");
  const at::Device d = t.device();
  if (backend == "gloo") {
    TORCH_CHECK_VALUE(d.is_cpu() || d.is_cuda(), op, ": key ", leaf.key.str(),
                      ": Gloo moves CPU and CUDA tensors, not ", device_name(d),
                      " ones");
  } else if (backend == "nccl") {
    TORCH_CHECK_VALUE(d.is_cuda(), op, ": key ", leaf.key.str(),
                      ": NCCL moves CUDA tensors, not ", device_name(d),
                      " ones");
  }
}

void rethrow_on_wire(const char* op, const std::string& context) {
  try {
    throw;
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, op, ": ", context, ": ", e.what_without_backtrace());
  } catch (const std::exception& e) {
    TORCH_CHECK(false, op, ": ", context, ": ", e.what());
  } catch (...) {
    TORCH_CHECK(false, op, ": ", context, ": unknown error");
  }
}

}  // namespace detail

// ---------------------------------------------------------------------------
// Work
// ---------------------------------------------------------------------------

struct Work::State {
  const char* op = "";
  /// One c10d work per message, with the key it carries.
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::string> contexts;
  /// Tensors that must live until the transfer completed.
  std::vector<at::Tensor> keep;
  /// A receive's write, checked when the transfer started.
  detail::LeafCopies copies;
  bool done = false;
  std::string error;  // set when the transfer failed
  /// Gloo's send and receive works say they completed only once waited on,
  /// so `is_completed` waits on them on a thread of its own (started by its
  /// first call), which sets `arrived`. Its future's destructor joins it.
  std::future<void> waiter;
  std::atomic<bool> arrived{false};

  ~State() {
    if (waiter.valid()) waiter.wait();
  }

  // Waits for every message; may run on the waiter thread.
  void wait_messages() {
    try {
      for (size_t i = 0; i < works.size(); ++i) {
        detail::on_wire(op, contexts[i], [&] { works[i]->wait(); });
      }
    } catch (const c10::Error& e) {
      error = e.what_without_backtrace();
    }
    arrived = true;
  }

  void wait() {
    if (!done) {
      done = true;
      if (waiter.valid()) {
        waiter.get();
      } else {
        wait_messages();
      }
      if (error.empty()) {
        try {
          copies.write();
        } catch (const c10::Error& e) {
          error = e.what_without_backtrace();
        }
      }
      works.clear();
      keep.clear();
      copies = detail::LeafCopies();
    }
    TORCH_CHECK(error.empty(), error);
  }

  bool is_completed() {
    if (done) return true;
    if (!waiter.valid()) {
      waiter = std::async(std::launch::async, [this] { wait_messages(); });
    }
    return arrived;
  }
};

Work::Work() = default;
Work::~Work() = default;
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&&) noexcept = default;
Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Work::wait() {
  if (state_) state_->wait();
}

bool Work::is_completed() const { return !state_ || state_->is_completed(); }

// ---------------------------------------------------------------------------
// The protocol
// ---------------------------------------------------------------------------

namespace {

void check_tag(const char* op, int init_tag, size_t n) {
  TORCH_CHECK_VALUE(init_tag >= 0, op, ": init_tag must be non-negative, got ",
                    init_tag);
  TORCH_CHECK_VALUE(static_cast<int64_t>(init_tag) + static_cast<int64_t>(n) <=
                        std::numeric_limits<int>::max(),
                    op, ": init_tag ", init_tag, " leaves no room for ", n,
                    " tags");
}

std::string key_context(const detail::WireLeaf& leaf, int tag) {
  return "key " + leaf.key.str() + " (tag " + std::to_string(tag) + ")";
}

// The messages of a transfer: one per leaf in the wire order, or with
// `consolidated` the dict's consolidated storage alone.
std::vector<detail::WireLeaf> messages(const char* op, const TensorDict& td,
                                       bool consolidated) {
  const auto& impl = detail::TensorDictImpl::of(td);
  if (!consolidated) return detail::wire_leaves(impl);
  TORCH_CHECK_VALUE(detail::is_consolidated_impl(impl), op,
                    ": consolidated=true needs a consolidated dict (see "
                    "consolidate())");
  return {{NestedKey("<consolidated storage>"), impl.consolidated, &impl, 0}};
}

}  // namespace

namespace {

// The messages of `td` for `op` with peer `rank`, after the checks every
// transfer makes.
std::vector<detail::WireLeaf> start(const char* op, const char* what, int rank,
                                    const TensorDict& td, const Group& pg,
                                    int init_tag, bool consolidated) {
  detail::check_peer(op, what, rank, pg);
  auto leaves = messages(op, td, consolidated);
  check_tag(op, init_tag, leaves.size());
  const std::string backend = pg.backend_name();
  for (const auto& leaf : leaves) detail::check_wire_leaf(op, leaf, backend);
  return leaves;
}

// Posts `tensors[i]` (leaf i's message) under tag `init_tag + i` with
// `call(group, message, tag)`, into `state`, which keeps the tensors alive.
template <typename Call>
void post(Work::State& state, const Group& pg,
          const std::vector<detail::WireLeaf>& leaves,
          std::vector<at::Tensor> tensors, int init_tag, const Call& call) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    const int tag = init_tag + static_cast<int>(i);
    std::vector<at::Tensor> message{tensors[i]};
    state.contexts.push_back(key_context(leaves[i], tag));
    auto work = detail::on_wire(state.op, state.contexts.back(), [&] {
      return detail::with_group(pg,
                                [&](auto& g) { return call(g, message, tag); });
    });
    state.works.push_back(std::move(work));
    state.keep.push_back(std::move(tensors[i]));
  }
}

}  // namespace

Work isend(const TensorDict& td, int dst, const Group& pg, int init_tag,
           bool consolidated) {
  const auto leaves =
      start("send", "destination", dst, td, pg, init_tag, consolidated);
  auto state = std::make_shared<Work::State>();
  state->op = "send";
  std::vector<at::Tensor> contiguous;
  contiguous.reserve(leaves.size());
  for (const auto& leaf : leaves)
    contiguous.push_back(leaf.tensor.contiguous());
  post(*state, pg, leaves, std::move(contiguous), init_tag,
       [&](auto& g, std::vector<at::Tensor>& message, int tag) {
         return g.send(message, dst, tag);
       });
  return Work(std::move(state));
}

void send(const TensorDict& td, int dst, const Group& pg, int init_tag,
          bool consolidated) {
  isend(td, dst, pg, init_tag, consolidated).wait();
}

Work irecv(const TensorDict& td, int src, const Group& pg, int init_tag,
           bool consolidated) {
  constexpr const char* op = "recv";
  const auto leaves = start(op, "source", src, td, pg, init_tag, consolidated);
  auto state = std::make_shared<Work::State>();
  state->op = op;
  // Every leaf is checked (the write plan's checks, as update_) before any
  // message is posted; the data lands in `staged` and is copied in `wait`.
  // `staged` starts as a copy of the leaf, so that a message shorter than
  // its leaf leaves the rest of the leaf as it was, as Python's recv (which
  // receives into the leaf) does, never with uninitialized bytes.
  std::vector<at::Tensor> staged;
  staged.reserve(leaves.size());
  for (const auto& leaf : leaves) {
    const at::Tensor& dest = leaf.tensor;
    staged.push_back(dest.detach().clone(at::MemoryFormat::Contiguous));
    // The consolidated storage is one flat buffer, outside the batch dims.
    state->copies.add(op, leaf.key,
                      consolidated ? c10::IntArrayRef()
                                   : c10::IntArrayRef(leaf.level->batch_size),
                      dest, staged.back());
  }
  post(*state, pg, leaves, std::move(staged), init_tag,
       [&](auto& g, std::vector<at::Tensor>& message, int tag) {
         return g.recv(message, src, tag);
       });
  return Work(std::move(state));
}

void recv(const TensorDict& td, int src, const Group& pg, int init_tag,
          bool consolidated) {
  irecv(td, src, pg, init_tag, consolidated).wait();
}

}  // namespace tensordict
