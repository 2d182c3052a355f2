// broadcast / all_reduce / all_gather: one fused buffer per call (one per
// dtype for all_reduce), after a handshake that checks every rank holds the
// same structure and passed its local checks.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tree.h"
#include "core/write_plan.h"
#include "dist/group.h"

namespace tensordict {
namespace {

using detail::WireLeaf;

// Byte offsets of fused leaves are multiples of this, so that every leaf is
// a valid typed view of the buffer.
constexpr int64_t kAlign = 16;

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A dict's leaves in the wire order, with a line per leaf describing it
// ("<key> <dtype> <shape>"), which the handshake compares across ranks.
struct Layout {
  std::vector<WireLeaf> leaves;
  std::vector<std::string> lines;
  std::string description;  // the lines, '\n'-terminated
  c10::optional<at::Device> device;
};

Layout layout_of(const TensorDict& td) {
  const auto& root = detail::TensorDictImpl::of(td);
  Layout l;
  l.leaves = detail::wire_leaves(root);
  l.lines.push_back("batch_size " + detail::shape_str(root.batch_size));
  for (const WireLeaf& leaf : l.leaves) {
    l.lines.push_back("leaf " + leaf.key.str() + " " +
                      detail::dtype_name(leaf.tensor.scalar_type()) + " " +
                      detail::shape_str(leaf.tensor.sizes()));
  }
  for (const auto& line : l.lines) l.description += line + "\n";
  return l;
}

// Local checks of every leaf: dense, one device the backend moves.
void check_leaves(const char* op, Layout& l, const Group& pg) {
  const std::string backend = pg.backend_name();
  for (const WireLeaf& leaf : l.leaves) {
    detail::check_wire_leaf(op, leaf, backend);
    const at::Device d = detail::normalize_device(leaf.tensor.device());
    TORCH_CHECK_VALUE(
        !l.device.has_value() || *l.device == d, op, ": key ", leaf.key.str(),
        ": the leaves live on different devices (",
        detail::device_name(*l.device), " and ", detail::device_name(d), ")");
    l.device = d;
  }
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

template <typename Fn>
void run(const char* op, const char* what, const Group& pg, Fn&& fn) {
  detail::on_wire(op, what, [&] {
    detail::with_group(pg, [&](auto& g) { fn(g)->wait(); });
  });
}

// Where the handshake's small tensors live: NCCL moves CUDA tensors only
// (the leaves' device, else the current CUDA device); the other backends
// take CPU tensors.
at::Device control_device(const Layout& l, const Group& pg) {
  if (pg.backend_name() != "nccl") return at::Device(at::kCPU);
  return l.device && l.device->is_cuda() ? *l.device : at::Device(at::kCUDA);
}

// Every rank's description, gathered (only after a failed handshake).
std::vector<std::string> gather_descriptions(const char* op,
                                             const std::string& mine,
                                             at::Device device,
                                             const Group& pg) {
  const int size = pg.size();
  const auto options = at::TensorOptions().device(device);
  std::vector<at::Tensor> in{at::full({1}, static_cast<int64_t>(mine.size()),
                                      options.dtype(at::kLong))};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size; ++r) {
    out[0].push_back(at::empty({1}, options.dtype(at::kLong)));
  }
  run(op, "the structure handshake", pg,
      [&](auto& g) { return g.allgather(out, in); });
  int64_t longest = 0;
  for (const auto& t : out[0]) longest = std::max(longest, t.item<int64_t>());
  at::Tensor bytes = at::zeros({longest}, at::kByte);
  std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  std::vector<at::Tensor> in2{bytes.to(device)};
  std::vector<std::vector<at::Tensor>> out2(1);
  for (int r = 0; r < size; ++r) {
    out2[0].push_back(at::empty({longest}, options.dtype(at::kByte)));
  }
  run(op, "the structure handshake", pg,
      [&](auto& g) { return g.allgather(out2, in2); });
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) {
    const at::Tensor got = out2[0][r].cpu();
    all.emplace_back(static_cast<const char*>(got.data_ptr()),
                     static_cast<size_t>(out[0][r].item<int64_t>()));
  }
  return all;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    const size_t end = s.find('\n', start);
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The handshake: one allreduce (MAX) of [h, -h, failed] over the ranks,
// where h hashes this rank's structure and `failed` is rank + 1 when this
// rank's local checks threw (`local_error`). Every rank learns whether all
// agree, so either all go on or all throw: none is left waiting in a
// collective the others never join.
void handshake(const char* op, const Layout& l, const std::string& local_error,
               const Group& pg) {
  const int64_t h =
      static_cast<int64_t>(fnv1a(l.description) & ((uint64_t{1} << 62) - 1));
  const int64_t failed = local_error.empty() ? 0 : pg.rank() + 1;
  const at::Device device = control_device(l, pg);
  std::vector<at::Tensor> v{at::tensor({h, -h, failed}, at::kLong).to(device)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  run(op, "the structure handshake", pg,
      [&](auto& g) { return g.allreduce(v, opts); });
  const at::Tensor t = v[0].cpu();
  const int64_t* r = t.data_ptr<int64_t>();
  TORCH_CHECK(local_error.empty(), local_error);
  TORCH_CHECK(r[2] == 0, op, ": rank ", r[2] - 1,
              " failed its local checks (its error names the key)");
  if (r[0] == h && r[1] == -h) return;
  // The structures differ: name the first difference between rank 0 and the
  // first rank that differs from it (every rank computes the same message).
  const auto all = gather_descriptions(op, l.description, device, pg);
  size_t other = 1;
  while (other < all.size() && all[other] == all[0]) ++other;
  TORCH_CHECK(other < all.size(), op,
              ": the structure handshake disagreed, yet every rank reports "
              "the same structure");
  const auto a = split_lines(all[0]);
  const auto b = split_lines(all[other]);
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  const std::string none = "no more leaves";
  TORCH_CHECK(false, op, ": the dicts differ between ranks: rank 0 has ",
              i < a.size() ? a[i] : none, " where rank ", other, " has ",
              i < b.size() ? b[i] : none);
}

// Runs `checks` and returns its error message ("" when it passed).
template <typename Fn>
std::string local_checks(Fn&& checks) {
  try {
    checks();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

// A typed view of `numel(shape)` elements of `dtype` at byte `offset` of the
// uint8 `buffer`.
at::Tensor typed_view(const at::Tensor& buffer, int64_t offset,
                      const at::Tensor& like) {
  const int64_t nbytes =
      like.numel() * static_cast<int64_t>(like.element_size());
  return buffer.narrow(0, offset, nbytes)
      .view(like.scalar_type())
      .view(like.sizes());
}

// One uint8 buffer holding every leaf (at kAlign offsets), and each leaf's
// typed view into it.
struct ByteBuffer {
  at::Tensor bytes;
  std::vector<int64_t> offsets;
  std::vector<at::Tensor> views;
};

ByteBuffer byte_buffer(const Layout& l) {
  ByteBuffer b;
  int64_t total = 0;
  for (const WireLeaf& leaf : l.leaves) {
    total = align_up(total);
    b.offsets.push_back(total);
    total +=
        leaf.tensor.numel() * static_cast<int64_t>(leaf.tensor.element_size());
  }
  b.bytes = at::empty({total}, at::TensorOptions().dtype(at::kByte).device(
                                   l.device.value_or(at::Device(at::kCPU))));
  for (size_t i = 0; i < l.leaves.size(); ++i) {
    b.views.push_back(typed_view(b.bytes, b.offsets[i], l.leaves[i].tensor));
  }
  return b;
}

void pack(const Layout& l, const std::vector<at::Tensor>& views) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < l.leaves.size(); ++i)
    views[i].copy_(l.leaves[i].tensor);
}

// The dtype a leaf is reduced in: its own where every LibTorch's Gloo
// reduces it; float16, bfloat16 and int16 in float32 and int32 (Gloo lacks
// bfloat16 and int16, and LibTorch 2.14's rejects float16; a sum in float32
// rounded once to the leaf's dtype is at least as exact, and int16 sums wrap
// the same once cast back). Undefined for dtypes that cannot be reduced
// (bool, complex).
c10::optional<at::ScalarType> reduced_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kChar:
    case at::kByte:
    case at::kInt:
    case at::kLong:
      return t;
    case at::kHalf:
    case at::kBFloat16:
      return at::kFloat;
    case at::kShort:
      return at::kInt;
    default:
      return c10::nullopt;
  }
}

c10d::ReduceOp c10d_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
  }
  TORCH_CHECK_VALUE(false, "all_reduce: unknown ReduceOp ",
                    static_cast<int>(op));
}

}  // namespace

void broadcast(const TensorDict& td, int root, const Group& pg) {
  constexpr const char* op = "broadcast";
  const int size = pg.size();
  TORCH_CHECK_VALUE(root >= 0 && root < size, op, ": root rank ", root,
                    " is out of range for a group of size ", size);
  Layout l = layout_of(td);
  ByteBuffer buffer;
  detail::LeafCopies copies;
  const std::string error = local_checks([&] {
    check_leaves(op, l, pg);
    buffer = byte_buffer(l);
    if (pg.rank() == root) return;
    for (size_t i = 0; i < l.leaves.size(); ++i) {
      copies.add(op, l.leaves[i].key, l.leaves[i].level->batch_size,
                 l.leaves[i].tensor, buffer.views[i]);
    }
  });
  handshake(op, l, error, pg);
  if (pg.rank() == root) pack(l, buffer.views);
  std::vector<at::Tensor> v{buffer.bytes};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  run(op, "the data", pg, [&](auto& g) { return g.broadcast(v, opts); });
  copies.write();
}

void all_reduce(const TensorDict& td, ReduceOp reduce, const Group& pg) {
  constexpr const char* op = "all_reduce";
  Layout l = layout_of(td);
  // One flat buffer per dtype, in the order the dtypes first appear.
  std::vector<at::ScalarType> dtypes;
  std::vector<at::Tensor> buffers;
  std::vector<at::Tensor> views(l.leaves.size());
  detail::LeafCopies copies;
  const std::string error = local_checks([&] {
    check_leaves(op, l, pg);
    std::vector<int64_t> numels;
    std::vector<std::pair<size_t, int64_t>> place;  // dtype slot, offset
    for (const WireLeaf& leaf : l.leaves) {
      const at::ScalarType leaf_dtype = leaf.tensor.scalar_type();
      const auto reduced = reduced_dtype(leaf_dtype);
      TORCH_CHECK_VALUE(reduced.has_value(), op, ": key ", leaf.key.str(),
                        ": cannot reduce ", detail::dtype_name(leaf_dtype),
                        " tensors");
      const at::ScalarType t = *reduced;
      TORCH_CHECK_VALUE(reduce != ReduceOp::kMean || at::isFloatingType(t), op,
                        ": key ", leaf.key.str(),
                        ": kMean needs floating-point leaves, got ",
                        detail::dtype_name(leaf_dtype));
      size_t slot = std::find(dtypes.begin(), dtypes.end(), t) - dtypes.begin();
      if (slot == dtypes.size()) {
        dtypes.push_back(t);
        numels.push_back(0);
      }
      place.emplace_back(slot, numels[slot]);
      numels[slot] += leaf.tensor.numel();
    }
    for (size_t s = 0; s < dtypes.size(); ++s) {
      buffers.push_back(
          at::empty({numels[s]}, at::TensorOptions().dtype(dtypes[s]).device(
                                     l.device.value_or(at::Device(at::kCPU)))));
    }
    for (size_t i = 0; i < l.leaves.size(); ++i) {
      const at::Tensor& leaf = l.leaves[i].tensor;
      views[i] = buffers[place[i].first]
                     .narrow(0, place[i].second, leaf.numel())
                     .view(leaf.sizes());
      copies.add(op, l.leaves[i].key, l.leaves[i].level->batch_size, leaf,
                 views[i]);
    }
  });
  handshake(op, l, error, pg);
  pack(l, views);
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d_op(reduce);
  for (auto& b : buffers) {
    std::vector<at::Tensor> v{b};
    run(op, "the data", pg, [&](auto& g) { return g.allreduce(v, opts); });
    if (reduce == ReduceOp::kMean) b.div_(pg.size());
  }
  copies.write();
}

TensorDict all_gather(const TensorDict& td, const Group& pg) {
  constexpr const char* op = "all_gather";
  Layout l = layout_of(td);
  ByteBuffer buffer;
  const std::string error = local_checks([&] {
    check_leaves(op, l, pg);
    buffer = byte_buffer(l);
  });
  handshake(op, l, error, pg);
  pack(l, buffer.views);
  const int size = pg.size();
  const int64_t nbytes_all = buffer.bytes.numel();
  at::Tensor gathered =
      at::empty({size, align_up(nbytes_all)}, buffer.bytes.options());
  std::vector<at::Tensor> in{buffer.bytes};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size; ++r) {
    out[0].push_back(gathered[r].narrow(0, 0, nbytes_all));
  }
  run(op, "the data", pg, [&](auto& g) { return g.allgather(out, in); });
  // Leaf i of every rank: the column block of its bytes in `gathered`,
  // viewed as [size, shape...].
  std::vector<at::Tensor> leaves(l.leaves.size());
  for (size_t i = 0; i < l.leaves.size(); ++i) {
    const at::Tensor& leaf = l.leaves[i].tensor;
    std::vector<int64_t> shape{size};
    shape.insert(shape.end(), leaf.sizes().begin(), leaf.sizes().end());
    leaves[l.leaves[i].index] =
        gathered
            .narrow(1, buffer.offsets[i],
                    leaf.numel() * static_cast<int64_t>(leaf.element_size()))
            .view(leaf.scalar_type())
            .view(shape);
  }
  std::vector<int64_t> batch{size};
  const auto& root = detail::TensorDictImpl::of(td);
  batch.insert(batch.end(), root.batch_size.begin(), root.batch_size.end());
  auto impl = detail::rebuild_from(root, std::move(leaves));
  // rebuild_from keeps the batch sizes: prepend the ranks' dim at every level.
  detail::for_each_level(*impl, [&](detail::TensorDictImpl& level) {
    level.batch_size.insert(level.batch_size.begin(), size);
  });
  return detail::TensorDictImpl::wrap(std::move(impl));
}

}  // namespace tensordict
