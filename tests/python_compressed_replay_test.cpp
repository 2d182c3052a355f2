// CompressedReplayBuffer's checkpoints against TorchRL 0.14's
// CompressedListStorage (python_reference.h), both ways: TorchRL's
// ReplayBuffer.loads reads what dumps wrote (the same rows, the cursor), and
// loads reads what TorchRL's ReplayBuffer.dumps wrote. TorchRL compresses
// with zlib on Python up to 3.13 and with zstd on 3.14 (the sid root's): the
// script passes zlib functions, as TorchRL's own up to 3.13, and also dumps
// with its default so that the zstd refusal is checked on real data.
#include <gtest/gtest.h>
#include <tensordict/lazy_replay_buffer.h>
#include <tensordict/tensordict.h>

#include <string>
#include <vector>

#include "python_reference.h"
#include "test_paths.h"
#include "test_util.h"

using tensordict::CompressedReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::RunPython;
using tensordict_test::TempDir;

namespace {

// argv[1]: the C++ checkpoint to load; argv[2]: where TorchRL's reading of
// it goes; argv[3], argv[4]: where TorchRL dumps its own buffers (zlib, and
// its default).
constexpr const char* kScript = R"py(
import sys, zlib, torch
from tensordict import TensorDict
from torchrl.data import CompressedListStorage, ReplayBuffer

def comp(t):
    return torch.frombuffer(bytearray(zlib.compress(t.cpu().numpy().tobytes(), level=3)), dtype=torch.uint8)

def decomp(b, m):
    t = torch.frombuffer(bytearray(zlib.decompress(b.cpu().numpy().tobytes())), dtype=m["dtype"])
    return t.reshape(m["shape"]).to(m["device"])

def rows(first, n):
    return TensorDict({
        "pixels": (torch.arange(n * 48, dtype=torch.int64).reshape(n, 3, 4, 4) + first).to(torch.uint8),
        "reward": torch.arange(first, first + n, dtype=torch.float32),
        "label": [f"row {first + i}" for i in range(n)],
    }, [n])

rb = ReplayBuffer(storage=CompressedListStorage(8, compression_fn=comp, decompression_fn=decomp))
rb.loads(sys.argv[1])
got = [rb.storage[i] for i in range(len(rb))]
TensorDict({
    "len": torch.tensor(len(rb)),
    "cursor": torch.tensor(rb._writer._cursor),
    "pixels": torch.stack([r["pixels"] for r in got]),
    "reward": torch.stack([r["reward"] for r in got]),
}, []).memmap(sys.argv[2])
with open(sys.argv[2] + "/labels.txt", "w") as f:
    f.write(",".join(r["label"] for r in got))

mine = ReplayBuffer(storage=CompressedListStorage(8, compression_fn=comp, decompression_fn=decomp))
mine.extend(rows(100, 10))
mine.dumps(sys.argv[3])
default = ReplayBuffer(storage=CompressedListStorage(8))
default.extend(rows(100, 3))
default.dumps(sys.argv[4])
)py";

TensorDict Row(int64_t i) {
  TensorDict r(
      {{"pixels",
        (at::arange(48, at::kLong).reshape({3, 4, 4}) + i).to(at::kByte)},
       {"reward", at::scalar_tensor(static_cast<double>(i), at::kFloat)}},
      {});
  r.set_non_tensor("label", "row " + std::to_string(i));
  return r;
}

}  // namespace

TEST(PythonReference, CompressedReplayCheckpointsMatchTorchRL) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  if (!tensordict_test::TensordictAtLeast(0, 14)) {
    GTEST_SKIP() << "CompressedListStorage is TorchRL 0.14's (CI's Python "
                    "0.14 stage)";
  }
  TempDir dir("td_compressed_pyref");
  // Ten rows into eight: rows 8 and 9 replaced rows 0 and 1.
  CompressedReplayBuffer rb(ReplayBufferOptions(8));
  for (int64_t i = 0; i < 10; ++i) rb.add(Row(i));
  rb.dumps(dir / "cpp");
  ASSERT_TRUE(RunPython(
      kScript, {dir / "cpp", dir / "read", dir / "torchrl", dir / "zstd"}));

  const TensorDict read = TensorDict::load_memmap(dir / "read");
  EXPECT_EQ(read.get("len").item<int64_t>(), 8);
  EXPECT_EQ(read.get("cursor").item<int64_t>(), 2);
  std::string labels;
  for (int64_t i = 0; i < 8; ++i) {
    const TensorDict want = rb.row(i);
    EXPECT_TRUE(at::equal(read.get("pixels")[i], want.get("pixels"))) << i;
    EXPECT_TRUE(at::equal(read.get("reward")[i], want.get("reward"))) << i;
    labels +=
        (i > 0 ? "," : "") + want.get_non_tensor("label").get<std::string>();
  }
  EXPECT_EQ(tensordict_test::ReadFile(dir / "read/labels.txt"), labels);

  // TorchRL's buffer of ten rows 100..109 in eight, cursor 2.
  CompressedReplayBuffer loaded(ReplayBufferOptions(8));
  loaded.loads(dir / "torchrl");
  EXPECT_EQ(loaded.size(), 8);
  EXPECT_EQ(loaded.cursor(), 2);
  for (int64_t i = 0; i < 8; ++i) {
    const int64_t first = i < 2 ? 108 + i : 100 + i;
    const TensorDict got = loaded.row(i);
    EXPECT_TRUE(
        at::equal(got.get("reward"),
                  at::scalar_tensor(static_cast<double>(first), at::kFloat)))
        << i;
    EXPECT_TRUE(at::equal(got.get("pixels"),
                          (at::arange(48, at::kLong).reshape({3, 4, 4}) +
                           first * 48 - 100 * 48 + 100)
                              .to(at::kByte)))
        << i;
    EXPECT_EQ(got.get_non_tensor("label").get<std::string>(),
              "row " + std::to_string(first));
  }
  // TorchRL's default on Python 3.14 is zstd: a clear refusal, nothing lost.
  tensordict_test::ExpectThrowsMsgPrefix(
      [&] { loaded.loads(dir / "zstd"); },
      "CompressedReplayBuffer::loads: '" + (dir / "zstd") + "': row 0: key ");
  EXPECT_EQ(loaded.size(), 8);
  EXPECT_EQ(loaded.cursor(), 2);
}
