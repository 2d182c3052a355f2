// CompressedReplayBuffer (tensordict/lazy_replay_buffer.h): rows kept
// compressed and sampled as lazy stacks, its compression functions, its
// all-or-nothing writes and loads, and its checkpoints. The exchange of
// checkpoints with TorchRL's CompressedListStorage is in
// python_compressed_replay_test.cpp. Also LazyStackReplayBuffer's device.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/lazy_replay_buffer.h>
#include <tensordict/tensordict.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using tensordict::CompressedReplayBuffer;
using tensordict::LazyStackedTensorDict;
using tensordict::ReplayBufferOptions;
using tensordict::RowCompression;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::TempDir;

// Row `i`: an image-like uint8 frame that compresses well, an observation
// of `1 + i % 3` floats, a step, a label (non-tensor data), a nested done
// flag that ends a trajectory every 4 rows.
TensorDict Row(int64_t i) {
  TensorDict r({{"pixels", at::full({3, 8, 8}, i % 7, at::kByte)},
                {"obs", at::arange(static_cast<double>(1 + i % 3)) +
                            static_cast<double>(i)},
                {"step", at::scalar_tensor(i, at::kLong)}},
               {});
  r.set_non_tensor("label", "row " + std::to_string(i));
  r.set({"next", "done"}, at::full({1}, i % 4 == 3, at::kBool));
  return r;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<int64_t> Steps(const LazyStackedTensorDict& s) {
  const at::Tensor t = s.get("step");
  return std::vector<int64_t>(t.data_ptr<int64_t>(),
                              t.data_ptr<int64_t>() + t.numel());
}

// Whether `a` and `b` hold the same keys in the same order, the same
// tensors bit for bit (dtype and shape included) and the same non-tensor
// data.
void ExpectSameRow(const TensorDict& a, const TensorDict& b) {
  ASSERT_EQ(a.keys(true), b.keys(true));
  EXPECT_EQ(a.batch_size(), b.batch_size());
  for (const auto& key : a.keys(true, true)) {
    const at::Tensor x = a.get(key);
    const at::Tensor y = b.get(key);
    EXPECT_EQ(x.scalar_type(), y.scalar_type()) << key;
    EXPECT_TRUE(x.sizes() == y.sizes() && at::equal(x, y)) << key;
  }
  for (const auto& key : a.keys(true)) {
    if (a.is_non_tensor(key)) {
      EXPECT_EQ(a.get_non_tensor(key), b.get_non_tensor(key)) << key;
    }
  }
}

TEST(CompressedReplayBuffer, StoresRowsCompressedAndSamplesLazyStacks) {
  CompressedReplayBuffer rb(ReplayBufferOptions(5).seed(1));
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(rb.add(Row(i)), i % 5);
  EXPECT_EQ(rb.size(), 5);
  EXPECT_EQ(rb.cursor(), 2);
  ExpectSameRow(rb.row(1), Row(6));  // round-robin
  for (int64_t i = 2; i < 5; ++i) ExpectSameRow(rb.row(i), Row(i));
  auto [batch, info] = rb.sample(16);
  EXPECT_EQ(batch.batch_size(), (std::vector<int64_t>{16}));
  for (int64_t k = 0; k < 16; ++k) {
    const int64_t at = info.index[k].item<int64_t>();
    ExpectSameRow(batch.tensordicts()[static_cast<size_t>(k)], rb.row(at));
  }
  // The 192 bytes of each frame are one repeated byte: zlib keeps a few.
  int64_t raw = 0;
  for (int64_t i = 2; i < 7; ++i) {
    for (const auto& t : Row(i).values(true, true)) raw += t.tensor().nbytes();
  }
  EXPECT_GT(rb.bytes(), 0);
  EXPECT_LT(rb.bytes(), raw / 2);
  // extend: a list, a dict along its first dim, a lazy stack.
  const at::Tensor idx = rb.extend({Row(10), Row(11)});
  EXPECT_TRUE(at::equal(idx, at::tensor({2, 3}, at::kLong)));
  TensorDict dense({{"pixels", at::arange(24, at::kByte).reshape({2, 3, 4})},
                    {"obs", at::rand({2, 3}, at::kDouble)},
                    {"step", at::tensor({20, 21}, at::kLong)}},
                   {2});
  dense.set({"next", "done"}, at::zeros({2, 1}, at::kBool));
  CompressedReplayBuffer other(ReplayBufferOptions(4));
  EXPECT_TRUE(at::equal(other.extend(dense), at::tensor({0, 1}, at::kLong)));
  ExpectSameRow(other.row(1), dense[1]);
  other.extend(tensordict::lazy_stack({Row(1), Row(2)}));
  EXPECT_EQ(other.size(), 4);
  ExpectSameRow(other.row(3), Row(2));
  // Empty leaves and a scalar leaf round-trip too.
  TensorDict odd(
      {{"none", at::zeros({0, 3})}, {"half", at::full({2}, 1.5, at::kHalf)}},
      {});
  CompressedReplayBuffer small(ReplayBufferOptions(2));
  small.add(odd);
  ExpectSameRow(small.row(0), odd);
  rb.clear();
  EXPECT_EQ(rb.size(), 0);
  EXPECT_EQ(rb.bytes(), 0);
}

TEST(CompressedReplayBuffer, EverySamplerWorks) {
  const std::vector<tensordict::SamplerConfig> samplers = {
      tensordict::RandomSampler(), tensordict::SamplerWithoutReplacement(),
      tensordict::PrioritizedSampler(), tensordict::SliceSampler(4)};
  for (size_t s = 0; s < samplers.size(); ++s) {
    SCOPED_TRACE(s);
    CompressedReplayBuffer rb(
        ReplayBufferOptions(16).sampler(samplers[s]).seed(3));
    for (int64_t i = 0; i < 16; ++i) rb.add(Row(i));
    const auto steps = Steps(rb.sample(8).first);
    ASSERT_EQ(steps.size(), 8U);
    if (s == 3) {
      for (size_t k = 0; k < 8; k += 4) {
        EXPECT_EQ(steps[k] % 4, 0);
        for (size_t j = 1; j < 4; ++j) EXPECT_EQ(steps[k + j], steps[k] + j);
      }
    }
    if (s == 2) {
      rb.update_priority(
          at::arange(16),
          at::zeros({16}).index_fill_(0, at::full({1}, 5, at::kLong), 1.0));
      for (int64_t st : Steps(rb.sample(8).first)) EXPECT_EQ(st, 5);
    }
  }
}

// A compression of one's own: the raw bytes, counting the calls.
struct RawBytes {
  std::shared_ptr<std::atomic<int>> packed =
      std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> unpacked =
      std::make_shared<std::atomic<int>>(0);
  [[nodiscard]] RowCompression compression() const {
    auto p = packed;
    auto u = unpacked;
    return RowCompression()
        .compress([p](const at::Tensor& t) {
          ++*p;
          return t.contiguous().flatten().view(at::kByte);
        })
        .decompress([u](const at::Tensor& b, c10::IntArrayRef shape,
                        at::ScalarType dtype) {
          ++*u;
          return b.view(dtype).reshape(shape);  // a view of the stored bytes
        });
  }
};

TEST(CompressedReplayBuffer, TakesCompressionFunctionsOfItsOwn) {
  RawBytes raw;
  CompressedReplayBuffer rb(ReplayBufferOptions(4), raw.compression());
  TensorDict row = Row(1);
  rb.add(row);
  EXPECT_EQ(*raw.packed, 4);  // pixels, obs, step, (next, done)
  // The stored bytes are a copy: writing into the row changes nothing.
  row.get("pixels").fill_(200);
  const TensorDict back = rb.row(0);
  ExpectSameRow(back, Row(1));
  EXPECT_EQ(*raw.unpacked, 4);
  // A sample owns its memory, though the function returned views.
  auto [batch, info] = rb.sample(2);
  batch.tensordicts()[0].get("pixels").fill_(99);
  ExpectSameRow(rb.row(0), Row(1));
  EXPECT_EQ(rb.bytes(), 192 + 2 * 4 + 8 + 1);  // the raw bytes of Row(1)
}

TEST(CompressedReplayBuffer, BadOptionsAndFunctionsAreRefused) {
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        CompressedReplayBuffer rb(ReplayBufferOptions(4),
                                  RowCompression().level(10));
      },
      "CompressedReplayBuffer: zlib's level is 0 to 9, got 10");
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        CompressedReplayBuffer rb(
            ReplayBufferOptions(4),
            RowCompression().compress([](const at::Tensor& t) { return t; }));
      },
      "CompressedReplayBuffer: set both compress and decompress, or neither "
      "(zlib)");
  ExpectThrowsMsg<c10::ValueError>(
      [] { CompressedReplayBuffer rb(ReplayBufferOptions(4).shared(true)); },
      "CompressedReplayBuffer: shared is not supported");
  // A compress that returns floats, and a decompress of the wrong shape.
  CompressedReplayBuffer floats(
      ReplayBufferOptions(4),
      RowCompression()
          .compress(
              [](const at::Tensor& t) { return t.to(at::kFloat).flatten(); })
          .decompress([](const at::Tensor& b, c10::IntArrayRef,
                         at::ScalarType) { return b; }));
  TensorDict r({{"x", at::zeros({2, 3})}}, {});
  ExpectThrowsMsg([&] { floats.add(r); },
                  "CompressedReplayBuffer::add: compress returned a tensor of "
                  "dtype Float and shape [6] for key x; it must return 1-D "
                  "uint8 bytes");
  EXPECT_EQ(floats.size(), 0);
  CompressedReplayBuffer flat(
      ReplayBufferOptions(4),
      RowCompression()
          .compress([](const at::Tensor& t) {
            return t.contiguous().flatten().view(at::kByte);
          })
          .decompress(
              [](const at::Tensor& b, c10::IntArrayRef, at::ScalarType dtype) {
                return b.view(dtype);  // not reshaped
              }));
  flat.add(r);
  ExpectThrowsMsg([&] { (void)flat.sample(1); },
                  "CompressedReplayBuffer::sample: the row at storage index 0, "
                  "key x: decompress returned a tensor of dtype Float and "
                  "shape [6]; the leaf is Float of shape [2, 3]");
}

TEST(CompressedReplayBuffer, AFailedWriteChangesNothing) {
  // The compression fails on a row with a key "bad".
  auto picky = RowCompression()
                   .compress([](const at::Tensor& t) {
                     TORCH_CHECK(t.dim() < 3, "too many dims");
                     return t.contiguous().flatten().view(at::kByte);
                   })
                   .decompress([](const at::Tensor& b, c10::IntArrayRef shape,
                                  at::ScalarType dtype) {
                     return b.view(dtype).reshape(shape);
                   });
  auto row = [](int64_t i) {
    TensorDict r({{"x", at::full({2}, static_cast<double>(i))},
                  {"step", at::scalar_tensor(i, at::kLong)}},
                 {});
    r.set({"next", "done"}, at::full({1}, i % 2 == 1, at::kBool));
    return r;
  };
  CompressedReplayBuffer rb(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)).seed(5),
      picky);
  CompressedReplayBuffer twin(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)).seed(5),
      picky);
  for (int64_t i = 0; i < 4; ++i) {
    rb.add(row(i));
    twin.add(row(i));
  }
  TensorDict bad = row(9);
  bad.set("img", at::zeros({1, 1, 1}));
  ExpectThrowsMsg(
      [&] {
        rb.extend({row(4), bad});
      },
      "CompressedReplayBuffer::extend: rows[1]: too many dims");
  ExpectThrowsMsg([&] { rb.add(bad); },
                  "CompressedReplayBuffer::add: too many dims");
  TensorDict no_done({{"x", at::zeros({2})}}, {});
  ExpectThrowsMsg(
      [&] {
        rb.extend({row(4), no_done});
      },
      "CompressedReplayBuffer::extend: the SliceSampler reads key "
      "('next', 'done'), which the row does not hold as a tensor");
  TensorDict batched({{"x", at::zeros({3, 2})}}, {3});
  batched.set({"next", "done"}, at::zeros({3, 1}, at::kBool));
  ExpectThrowsMsg([&] { rb.add(batched); },
                  "CompressedReplayBuffer::add: the rows stored have 0 batch "
                  "dims, and this row has batch_size [3]");
  EXPECT_EQ(rb.size(), 4);
  EXPECT_EQ(rb.cursor(), 4);
  EXPECT_EQ(rb.bytes(), twin.bytes());
  for (int64_t i = 0; i < 4; ++i) ExpectSameRow(rb.row(i), twin.row(i));
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(
        at::equal(rb.sample(4).second.index, twin.sample(4).second.index));
  }
}

TEST(CompressedReplayBuffer, CheckpointsResumeTheSameRowsAndSamples) {
  TempDir dir("td_compressed_checkpoint");
  CompressedReplayBuffer rb(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)).seed(3));
  for (int64_t i = 0; i < 9; ++i) rb.add(Row(i));
  TensorDict own = Row(9);
  own.set({"extra", "deep"}, at::ones({2, 2}, at::kInt));  // a sub-dict
  rb.add(own);
  rb.dumps(dir / "cp");
  // TorchRL's files, beside the index buffer's checkpoint.
  for (const char* f :
       {"storage/metadata.json", "storage/data_indices.json",
        "storage/compressed_data/meta.json", "writer/metadata.json",
        "buffer_metadata.json", "index/checkpoint/meta.json"}) {
    EXPECT_TRUE(std::ifstream(dir / "cp" + "/" + f).good()) << f;
  }
  EXPECT_EQ(ReadText(dir / "cp/writer/metadata.json"), "{\"cursor\":4}");
  CompressedReplayBuffer resumed(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)).seed(99));
  resumed.add(Row(50));
  resumed.loads(dir / "cp");
  EXPECT_EQ(resumed.size(), rb.size());
  EXPECT_EQ(resumed.cursor(), rb.cursor());
  EXPECT_EQ(resumed.bytes(), rb.bytes());
  for (int64_t i = 0; i < rb.size(); ++i)
    ExpectSameRow(resumed.row(i), rb.row(i));
  for (int k = 0; k < 3; ++k) {
    auto [a, ia] = rb.sample(4);
    auto [b, ib] = resumed.sample(4);
    EXPECT_TRUE(at::equal(ia.index, ib.index)) << "sample " << k;
    EXPECT_EQ(Steps(a), Steps(b));
  }
  // Without index/ it is TorchRL's checkpoint: the rows and the cursor are
  // read, and the sampler starts afresh.
  std::filesystem::remove_all(dir / "cp/index");
  CompressedReplayBuffer imported(
      ReplayBufferOptions(6).sampler(tensordict::SliceSampler(2)));
  imported.loads(dir / "cp");
  EXPECT_EQ(imported.size(), 6);
  EXPECT_EQ(imported.cursor(), 4);
  for (int64_t i = 0; i < rb.size(); ++i)
    ExpectSameRow(imported.row(i), rb.row(i));
  imported.add(Row(20));
  ExpectSameRow(imported.row(4), Row(20));
  // An empty buffer's checkpoint empties a buffer.
  CompressedReplayBuffer empty(ReplayBufferOptions(6));
  empty.dumps(dir / "empty");
  CompressedReplayBuffer plain(ReplayBufferOptions(6));
  plain.add(Row(0));
  plain.loads(dir / "empty");
  EXPECT_EQ(plain.size(), 0);
  ExpectThrowsMsg([&] { rb.dumps(dir / "cp"); },
                  "CompressedReplayBuffer::dumps: '" + (dir / "cp") +
                      "' is not empty; dumps writes a checkpoint into a new "
                      "or empty directory only");
}

TEST(CompressedReplayBuffer, ARefusedLoadChangesNothing) {
  TempDir dir("td_compressed_refused");
  CompressedReplayBuffer source(ReplayBufferOptions(6).seed(3));
  for (int64_t i = 0; i < 3; ++i) source.add(Row(i));
  source.dumps(dir / "cp");
  CompressedReplayBuffer rb(ReplayBufferOptions(6).seed(7));
  CompressedReplayBuffer twin(ReplayBufferOptions(6).seed(7));
  for (int64_t i = 10; i < 14; ++i) {
    rb.add(Row(i));
    twin.add(Row(i));
  }
  auto unchanged = [&] {
    EXPECT_EQ(rb.size(), 4);
    EXPECT_EQ(rb.cursor(), 4);
    for (int64_t i = 0; i < 4; ++i) ExpectSameRow(rb.row(i), Row(10 + i));
  };
  ExpectThrowsMsg([&] { rb.loads(dir / "none"); },
                  "CompressedReplayBuffer::loads: '" + (dir / "none") +
                      "' holds no CompressedReplayBuffer checkpoint (no "
                      "storage/metadata.json and storage/data_indices.json; "
                      "dumps writes them, as TorchRL's ReplayBuffer.dumps of a "
                      "CompressedListStorage does)");
  unchanged();
  // Row 2's pixels claim another shape: its bytes do not decompress to it.
  const std::string meta_path = dir / "cp/storage/metadata.json";
  std::string meta = ReadText(meta_path);
  const std::string shape = "[3,8,8]";
  const size_t last = meta.rfind(shape);
  ASSERT_NE(last, std::string::npos);
  meta.replace(last, shape.size(), "[3,8,9]");
  std::ofstream(meta_path, std::ios::trunc) << meta;
  ExpectThrowsMsg([&] { rb.loads(dir / "cp"); },
                  "CompressedReplayBuffer::loads: '" + (dir / "cp") +
                      "': row 2: key pixels: the bytes do not decompress to "
                      "the 216 bytes of shape [3, 8, 9] and dtype Byte (zlib: "
                      "stream of 192 bytes)");
  unchanged();
  // Zstandard data (TorchRL's default on Python 3.14).
  meta.replace(last, shape.size(), shape);
  std::ofstream(meta_path, std::ios::trunc) << meta;
  TensorDict zstd_row =
      TensorDict::load_memmap(dir / "cp/storage/compressed_data/2");
  zstd_row.get("pixels").narrow(0, 0, 4).copy_(
      at::tensor({0x28, 0xB5, 0x2F, 0xFD}, at::kByte));
  ExpectThrowsMsg([&] { rb.loads(dir / "cp"); },
                  "CompressedReplayBuffer::loads: '" + (dir / "cp") +
                      "': row 2: key pixels: the bytes are zstd data "
                      "(TorchRL's default on Python 3.14), and this buffer "
                      "decompresses zlib: pass RowCompression a decompress "
                      "function");
  unchanged();
  // Another capacity: the index buffer's own check.
  CompressedReplayBuffer small(ReplayBufferOptions(2));
  small.add(Row(0));
  small.dumps(dir / "small");
  tensordict_test::ExpectThrowsMsgPrefix(
      [&] { rb.loads(dir / "small"); },
      "CompressedReplayBuffer::loads: the index: ReplayBuffer::loads: ");
  unchanged();
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(
        at::equal(rb.sample(4).second.index, twin.sample(4).second.index));
  }
}

// A row of `n` observations (a shape of its own) and a reward.
TensorDict Ranked(int64_t n, double reward) {
  return TensorDict(
      {{"obs", at::full({n}, reward)}, {"reward", at::scalar_tensor(reward)}},
      {});
}

// The rewards stored, in storage order.
template <typename Buffer>
std::vector<double> Rewards(const Buffer& rb) {
  std::vector<double> out;
  for (int64_t i = 0; i < rb.size(); ++i) {
    out.push_back(rb.row(i).get("reward").template item<double>());
  }
  return out;
}

template <typename Buffer>
void ExpectMaxValueWriterKeepsTheBest(const std::string& cls) {
  Buffer rb(ReplayBufferOptions(3).writer(
      tensordict::MaxValueWriter().rank_key("reward")));
  EXPECT_TRUE(at::equal(rb.extend({Ranked(1, 1), Ranked(2, 5), Ranked(3, 3)}),
                        at::tensor({0, 1, 2}, at::kLong)));
  EXPECT_EQ(rb.add(Ranked(4, 0)), -1);  // lower than every row: dropped
  EXPECT_EQ(rb.add(Ranked(5, 4)), 0);   // replaces the lowest, 1
  EXPECT_EQ(Rewards(rb), (std::vector<double>{4, 5, 3}));
  EXPECT_EQ(rb.row(0).get("obs").numel(), 5);
  // Within one batch, a row replaced by a later one reports -1.
  EXPECT_TRUE(at::equal(rb.extend({Ranked(1, 6), Ranked(1, 7), Ranked(1, 8)}),
                        at::tensor({2, 0, 1}, at::kLong)));
  EXPECT_EQ(Rewards(rb), (std::vector<double>{7, 8, 6}));
  ExpectThrowsMsg(
      [&] {
        rb.add(TensorDict({{"obs", at::zeros({2})}}, {}));
      },
      cls +
          "::add: the MaxValueWriter reads key reward, which "
          "the row does not hold as a tensor");
  EXPECT_EQ(Rewards(rb), (std::vector<double>{7, 8, 6}));
}

TEST(LazyStackReplayBuffer, MaxValueWriterKeepsTheRowsOfHighestRank) {
  ExpectMaxValueWriterKeepsTheBest<tensordict::LazyStackReplayBuffer>(
      "LazyStackReplayBuffer");
}

TEST(CompressedReplayBuffer, MaxValueWriterKeepsTheRowsOfHighestRank) {
  ExpectMaxValueWriterKeepsTheBest<CompressedReplayBuffer>(
      "CompressedReplayBuffer");
}

template <typename Buffer>
void ExpectTheRateLimiterWaitsWithTheLockReleased(const std::string& cls) {
  Buffer rb(ReplayBufferOptions(100).seed(0).rate_limiter(
      tensordict::RateLimiter(1.0)
          .min_size_to_sample(3)
          .error_buffer(2)
          .timeout(std::chrono::milliseconds(50))));
  rb.add(Ranked(1, 0));
  rb.add(Ranked(2, 1));
  ExpectThrowsMsg([&] { (void)rb.sample(1); },
                  cls +
                      "::sample: the rate limiter did not allow 1 rows "
                      "within 50 ms (2 rows inserted, 0 sampled, size 2; "
                      "samples_per_insert 1, min_size_to_sample 3, "
                      "error_buffer 2)");
  rb.add(Ranked(3, 2));  // diff 3, min_diff 1: two rows may be sampled
  (void)rb.sample(2);
  EXPECT_EQ(rb.rate_limiter_info().sampled, 2);
  EXPECT_EQ(rb.rate_limiter_info().inserted, 3);
  // A waiting sample holds no lock: the row that lets it go comes in from
  // another thread, and size() answers meanwhile.
  Buffer waits(ReplayBufferOptions(10).rate_limiter(
      tensordict::RateLimiter(1.0).min_size_to_sample(1).error_buffer(1)));
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(waits.size(), 0);
    waits.add(Ranked(4, 9));
  });
  auto [batch, info] = waits.sample(1);
  late.join();
  EXPECT_EQ(batch.get("reward").template item<double>(), 9);
  // A checkpoint carries the counts.
  TempDir dir("td_list_limiter");
  rb.dumps(dir / "cp");
  Buffer resumed(ReplayBufferOptions(100).rate_limiter(
      tensordict::RateLimiter(1.0).min_size_to_sample(3).error_buffer(2)));
  resumed.loads(dir / "cp");
  EXPECT_EQ(resumed.rate_limiter_info().inserted, 3);
  EXPECT_EQ(resumed.rate_limiter_info().sampled, 2);
  rb.clear();
  EXPECT_EQ(rb.rate_limiter_info().inserted, 0);
  ExpectThrowsMsg<c10::ValueError>(
      [] {
        Buffer bad(ReplayBufferOptions(4).rate_limiter(
            tensordict::RateLimiter(1.0).min_size_to_sample(5)));
      },
      "RateLimiter: min_size_to_sample must be in [1, capacity 4], got 5");
}

TEST(LazyStackReplayBuffer, TheRateLimiterWaitsWithTheLockReleased) {
  ExpectTheRateLimiterWaitsWithTheLockReleased<
      tensordict::LazyStackReplayBuffer>("LazyStackReplayBuffer");
}

TEST(CompressedReplayBuffer, TheRateLimiterWaitsWithTheLockReleased) {
  ExpectTheRateLimiterWaitsWithTheLockReleased<CompressedReplayBuffer>(
      "CompressedReplayBuffer");
}

TEST(LazyStackReplayBuffer, KeepsItsRowsOnItsDevice) {
  // The meta device stands in for an accelerator: the rows are copied there.
  tensordict::LazyStackReplayBuffer rb(
      ReplayBufferOptions(4).device(at::Device(at::kMeta)));
  rb.add(TensorDict({{"x", at::zeros({2})}}, {}));
  EXPECT_EQ(rb.row(0).get("x").device().type(), at::kMeta);
  EXPECT_EQ(rb.sample(3).first.tensordicts()[2].get("x").device().type(),
            at::kMeta);
}

}  // namespace
