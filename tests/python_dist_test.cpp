// Interop with the reference Python tensordict over Gloo
// (python_reference.h): send/recv and init_remote/from_remote_init with a
// live Python peer, both ways.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <string>

#include "dist_util.h"
#include "python_reference.h"
#include "test_util.h"

using tensordict::TensorDict;
using tensordict_test::kSkipMessage;
using tensordict_test::PyRef;
using tensordict_test::ReadFile;
using tensordict_test::TempDir;
using tensordict_test::TutorialPython;
using tensordict_test::WriteFile;

// ---- Point to point with Python's td.send / td.recv ------------------------

// Python's side of the point-to-point tests: joins the default Gloo group at
// 127.0.0.1:argv[1] as rank 1 of 2, then either receives into zeros and
// checks the values (argv[2] == "recv") or sends (argv[2] == "send"). The
// dict is tensordict_test::WireDict, built the same way.
constexpr const char* kWireScript = R"py(
import io, pickle, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from tensordict import TensorDict

def wire(seed):
    def v(k, shape, dtype):
        n = 1
        for s in shape:
            n *= s
        return ((torch.arange(n, dtype=torch.float64) + 10 * (seed + k))
                .reshape(shape).remainder(100).to(dtype))
    return TensorDict({
        "zeta": v(0, (2, 3), torch.float32),
        "alpha": v(1, (2,), torch.float64),
        "next": {"obs": v(2, (2, 4), torch.float16),
                 "done": v(3, (2, 1), torch.bool),
                 "Reward": v(4, (2,), torch.bfloat16)},
        "i8": v(5, (2, 2), torch.int8),
        "i16": v(6, (2,), torch.int16),
        "i32": v(7, (2, 5), torch.int32),
        "i64": v(8, (2,), torch.int64),
        "u8": v(9, (2, 3), torch.uint8),
        "c64": v(10, (2,), torch.complex64),
        "c128": v(11, (2, 2), torch.complex128),
        "empty": torch.zeros(2, 0),
    }, [2])

dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}",
                        rank=1, world_size=2, timeout=timedelta(seconds=30))
RESERVED = ("cls", "non_tensors", "leaves", "cls_metadata", "_total_bytes")

# torch >= 2's send_object_list / recv_object_list for one object (torch
# 1.13 lacks them): an int64 [1] holding the pickle's length, then the
# pickle (pickle.Pickler's default protocol) as uint8.
def send_object_list(objs, dst):
    f = io.BytesIO()
    pickle.Pickler(f).dump(objs[0])
    data = torch.frombuffer(bytearray(f.getvalue()), dtype=torch.uint8)
    dist.send(torch.tensor([data.numel()], dtype=torch.long), dst=dst)
    dist.send(data, dst=dst)

def recv_object_list(objs, src):
    size = torch.empty(1, dtype=torch.long)
    dist.recv(size, src=src)
    data = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.recv(data, src=src)
    objs[0] = pickle.loads(data.numpy().tobytes())

def from_remote_init(src):
    # tensordict >= 0.5's TensorDict.from_remote_init, message for message.
    meta = [None]
    recv_object_list(meta, src=src)
    meta = meta[0]
    storage = torch.empty(meta.pop("_total_bytes"), dtype=torch.uint8)
    dist.recv(storage, src=src)
    def rebuild(m):
        d = {}
        for k, (dtype, shape, start, stop, pad) in m["leaves"].items():
            v = storage[start:stop].view(getattr(torch, dtype[len("torch."):]))
            if pad:
                v = v[: torch.Size(shape).numel()]
            d[k] = v.view(shape)
        for k, v in m.items():
            if k not in RESERVED:
                d[k] = rebuild(v)
        return TensorDict(d, m["cls_metadata"]["batch_size"])
    return rebuild(meta)

def init_remote(td, dst):
    # tensordict >= 0.5's td.init_remote(dst): consolidate()'s layout (each
    # leaf padded to 8 bytes, depth first in insertion order), its metadata
    # pickled by send_object_list, then the storage.
    chunks, offset = [], [0]
    def level(t):
        m = {"cls": "TensorDict", "non_tensors": {}, "leaves": {},
             "cls_metadata": {"device": None, "names": None,
                              "batch_size": list(t.batch_size), "is_locked": False}}
        for k in t.keys():
            v = t.get(k)
            if isinstance(v, TensorDict):
                m[k] = level(v)
                continue
            b = v.contiguous().view(-1).view(torch.uint8)
            n = b.numel()
            pad = (8 - n % 8) % 8
            chunks.extend([b, torch.zeros(pad, dtype=torch.uint8)])
            m["leaves"][k] = (str(v.dtype), list(v.shape), offset[0], offset[0] + n + pad, pad)
            offset[0] += n + pad
        return m
    meta = level(td)
    storage = torch.cat(chunks)
    meta["_total_bytes"] = storage.numel()
    send_object_list([meta], dst=dst)
    dist.send(storage, dst=dst)

def check(td, expected):
    for key in expected.keys(True, True):
        assert torch.equal(td[key], expected[key]), (key, td[key], expected[key])

# argv[4] "live": tensordict's own init_remote / from_remote_init (>= 0.5),
# then a second round of consolidated send / recv (>= 0.9) over the dict
# they made; "emulate": the functions above, one round.
mode, tag, live = sys.argv[2], int(sys.argv[3]), sys.argv[4] == "live"
if mode == "recv":
    td = wire(0).apply(torch.zeros_like)
    td.recv(0, init_tag=tag)
    check(td, wire(2))
elif mode == "send":
    wire(1).send(0, init_tag=tag)
elif mode == "remote_recv":
    td = TensorDict.from_remote_init(0) if live else from_remote_init(0)
    check(td, wire(2))
    if live:
        td.recv(0, consolidated=True)
        check(td, wire(3))
elif mode == "remote_send":
    # complex128 first: after an odd number of 8-byte blocks its offset
    # would not be a multiple of 16, which Python's own view(dtype) rejects.
    w = wire(1)
    td = TensorDict({"c128": w["c128"]}, [2])
    td.update(w.exclude("c128"))
    if live:
        td = td.consolidate()
        td.init_remote(0)
        td.update_(wire(3))
        td.send(0, consolidated=True)
    else:
        init_remote(td, 0)
print("python ok")
)py";

// Runs the Python `script` with `args` in the background and `cpp_side`
// here; returns the script's exit status (-1 when it had to be killed, or
// when `cpp_side` threw: a test failure with Python's output), with its
// output in `output`.
int WithPythonScript(const std::string& script, const std::string& args,
                     const std::function<void()>& cpp_side,
                     std::string& output) {
  TempDir tmp("td_pyref_dist");
  WriteFile(tmp / "script.py", script);
  const std::string cmd = PyRef() + " -W ignore '" + (tmp / "script.py") +
                          "' " + args + " > '" + (tmp / "out") + "' 2>&1";
  const pid_t pid = tensordict_test::Spawn({"/bin/sh", "-c", cmd});
  try {
    cpp_side();
  } catch (const c10::Error& e) {
    tensordict_test::Reap(pid, std::chrono::seconds(5));
    output = ReadFile(tmp / "out");
    ADD_FAILURE() << e.what_without_backtrace() << "\nPython's output:\n"
                  << output;
    return -1;
  }
  const int status = tensordict_test::Reap(pid, std::chrono::seconds(60));
  output = ReadFile(tmp / "out");
  return status;
}

// The script's last line is "python ok" (Gloo and torch log to its output
// before that).
void ExpectPythonOk(const std::string& output) {
  const std::string ok = "python ok\n";
  EXPECT_TRUE(output.size() >= ok.size() &&
              output.compare(output.size() - ok.size(), ok.size(), ok) == 0 &&
              (output.size() == ok.size() ||
               output[output.size() - ok.size() - 1] == '\n'))
      << output;
}

// Whether the reference has init_remote, from_remote_init and consolidated
// send / recv of its own (tensordict >= 0.9).
bool LiveRemoteInit() { return tensordict_test::TensordictAtLeast(0, 9); }

// kWireScript as rank 1 of a group with this process (rank 0).
int WithPythonPeer(
    const std::string& mode, int init_tag,
    const std::function<void(const tensordict::Group&)>& cpp_side,
    std::string& output) {
  const int port = tensordict_test::FreePort();
  return WithPythonScript(
      kWireScript,
      std::to_string(port) + " " + mode + " " + std::to_string(init_tag) +
          (LiveRemoteInit() ? " live" : " emulate"),
      [&] {
        tensordict::GlooGroupOptions options;
        options.port = port;
        options.python_world = true;
        cpp_side(tensordict::make_gloo_group(0, 2, options));
      },
      output);
}

// Python's td.recv(0) receives what this library's send sends: the same
// leaves in the same order, under the same tags.
TEST(PythonReference, TensordictRecvsWhatThisLibrarySends) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  for (int init_tag : {0, 5}) {
    std::string output;
    const int status = WithPythonPeer(
        "recv", init_tag,
        [&](const tensordict::Group& pg) {
          tensordict::send(tensordict_test::WireDict(2), 1, pg, init_tag);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    ExpectPythonOk(output);
  }
}

// This library's recv receives what Python's td.send(0) sends.
TEST(PythonReference, ThisLibraryRecvsWhatTensordictSends) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  for (int init_tag : {0, 5}) {
    TensorDict td = tensordict_test::ZeroWireDict();
    std::string output;
    const int status = WithPythonPeer(
        "send", init_tag,
        [&](const tensordict::Group& pg) {
          tensordict::recv(td, 1, pg, init_tag);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    const TensorDict expected = tensordict_test::WireDict(1);
    for (const auto& key : expected.keys(true, true)) {
      EXPECT_TRUE(at::equal(td.get(key), expected.get(key))) << key;
    }
  }
}

// Python tensordict's from_remote_init receives what init_remote sends, and
// this library's from_remote_init receives what Python's init_remote sends.
// Against tensordict >= 0.9 these are Python's own, and each side then
// sends the next values with a consolidated send into the dict the other
// side made; 0.4 lacks them, so they are emulated message for message with
// torch.distributed (kWireScript), one round.
TEST(PythonReference, InitRemoteAndFromRemoteInitInPythonsMessageLayout) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  {
    std::string output;
    const int status = WithPythonPeer(
        "remote_recv", 0,
        [&](const tensordict::Group& pg) {
          const TensorDict td = tensordict_test::WireDict(2).consolidate();
          tensordict::init_remote(td, 1, pg);
          if (!LiveRemoteInit()) return;
          td.update_(tensordict_test::WireDict(3));
          tensordict::send(td, 1, pg, 0, /*consolidated=*/true);
        },
        output);
    EXPECT_EQ(status, 0) << output;
    ExpectPythonOk(output);
  }
  {
    TensorDict td;
    std::string output;
    const int status = WithPythonPeer(
        "remote_send", 0,
        [&](const tensordict::Group& pg) {
          td = tensordict::from_remote_init(1, pg);
          EXPECT_TRUE(
              tensordict_test::SameDict(td, tensordict_test::WireDict(1)));
          EXPECT_TRUE(td.is_consolidated());
          if (!LiveRemoteInit()) return;
          tensordict::recv(td, 1, pg, 0, /*consolidated=*/true);
          EXPECT_TRUE(
              tensordict_test::SameDict(td, tensordict_test::WireDict(3)));
        },
        output);
    EXPECT_EQ(status, 0) << output;
    EXPECT_TRUE(td.is_consolidated());
  }
}

// The distributed tutorial's last section, as it stands there: its Python
// learner (tensordict 0.4) and its C++ actor (copied below, the port
// replaced by a free one).
TEST(PythonReference, TheDistributedTutorialsPythonLearnerRuns) {
  if (PyRef().empty()) GTEST_SKIP() << kSkipMessage;
  const std::string port = std::to_string(tensordict_test::FreePort());
  const std::string learner =
      TutorialPython("distributed.md", "distributed-learner", "29500", port);
  ASSERT_FALSE(learner.empty());
  TensorDict sent;
  at::Tensor final_weight;
  std::string output;
  // After the tutorial's code, the learner reports what it received last.
  const std::string script = learner + R"py(
print("received: action sum %d, observation sum %.3f" % (
    int(rollout["action"].sum()), float(rollout["observation"].double().sum())))
)py";
  at::Tensor initial_weight;
  const int status = WithPythonScript(
      script, "",
      [&] {
        tensordict::GlooGroupOptions options;
        options.port = std::stoi(port);
        options.python_world = true;  // join Python's init_process_group
        const tensordict::Group pg =
            tensordict::make_gloo_group(/*rank=*/1, 2, options);

        const int64_t T = 16, E = 8;
        torch::nn::Linear policy(4, 2);
        initial_weight = policy->weight.detach().clone();
        TensorDict weights({{"weight", policy->weight}, {"bias", policy->bias}},
                           {});
        tensordict::CartPoleEnv env({E}, /*categorical_action_encoding=*/true);
        env.set_seed(0);
        TensorDict input = env.reset();
        torch::NoGradGuard no_grad;  // writes into the parameters
        TensorDict rollout({}, {T, E});
        for (int iteration = 0; iteration < 3; ++iteration) {
          tensordict::recv(weights, 0, pg);  // into the policy, in place
          for (int64_t t = 0; t < T; ++t) {
            const torch::Tensor logits = policy(input.get("observation"));
            input.set("action", logits.softmax(-1).multinomial(1).squeeze(-1));
            auto [step, next] = env.step_and_maybe_reset(input);
            // The learner's keys: the observation, the action and "next".
            rollout[t] = step.select({"observation", "action", "next"});
            input = next;
          }
          tensordict::send(rollout, 0, pg);  // one message per leaf
        }
        sent = rollout;
        final_weight = policy->weight.detach().clone();
      },
      output);
  ASSERT_EQ(status, 0) << output;
  EXPECT_NE(output.find("iteration 2: 128 transitions, "), std::string::npos)
      << output;
  char expected[128];
  std::snprintf(
      expected, sizeof(expected),
      "received: action sum %lld, observation sum %.3f\n",
      static_cast<long long>(sent.get("action").sum().item<int64_t>()),
      sent.get("observation").to(at::kDouble).sum().item<double>());
  EXPECT_NE(output.find(expected), std::string::npos) << expected << output;
  // The actor acted with the learner's weights, not its own initial ones.
  EXPECT_FALSE(at::equal(final_weight, initial_weight));
}
