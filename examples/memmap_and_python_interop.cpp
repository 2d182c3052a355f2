// Writes a TensorDict in Python tensordict's memmap format, checks the files
// against the format (meta.json content and key order, leaf sizes and bytes),
// reopens it zero-copy, writes a row through the mapping, then shows the
// single-file save/load, the torch.load route (pickle_save), and a replay
// buffer whose directory TorchRL loads (its files checked), and non-tensor
// data in Python's format.
//
// Usage: memmap_and_python_interop [output dir]   (default: a temp dir,
// removed at exit). Exits nonzero when a check fails.
#include <ftw.h>
#include <tensordict/persistence.h>
#include <tensordict/tensordict.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using tensordict::TensorDict;

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "CHECK FAILED: " << what << "\n";
    ++failures;
  }
}

// Removes `path` and everything under it, as `rm -rf`. Not
// std::filesystem::remove_all: pytorch.org's and pip's libtorch.so (2.5 and
// later) export their own copy of it, which programs linked with them may
// call, and it crashes (pytorch/pytorch#133437).
void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string bytes_of(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()),
                     c.numel() * c.element_size());
}

// Checks one directory level against the format, recursively.
void check_level(const fs::path& dir, const TensorDict& td) {
  const auto meta = nlohmann::ordered_json::parse(read_file(dir / "meta.json"));
  std::vector<std::string> keys;
  for (auto it = meta.begin(); it != meta.end(); ++it) keys.push_back(it.key());
  // Entries in insertion order, then shape, device, _type.
  std::vector<std::string> expected;
  for (const auto& k : td.keys()) expected.push_back(k.str());
  expected.insert(expected.end(), {"shape", "device", "_type"});
  check(keys == expected, dir.string() + "/meta.json key order");
  check(meta["shape"] == nlohmann::ordered_json(td.batch_size().vec()),
        "batch size");
  check(meta["_type"] == "<class 'tensordict._td.TensorDict'>", "_type");
  for (const auto& k : td.keys()) {
    const std::string key = k.str();
    const auto& e = meta[key];
    if (td.get_entry(k).is_tensordict()) {
      check(e == nlohmann::ordered_json{{"type", "TensorDict"}},
            key + ": sub-dict entry");
      check_level(dir / key, td.get_tensordict(k));
      continue;
    }
    torch::Tensor t = td.get(k);
    check(e["device"] == "cpu" && e["is_nested"] == false,
          key + ": device/is_nested");
    check(e["shape"] == nlohmann::ordered_json(t.sizes().vec()),
          key + ": shape");
    const fs::path file = dir / (key + ".memmap");
    // numel x itemsize raw bytes, no header.
    check(fs::file_size(file) ==
              static_cast<uintmax_t>(t.numel() * t.element_size()),
          key + ": file size");
    check(read_file(file) == bytes_of(t), key + ": file bytes");
  }
}

}  // namespace

int main(int argc, char** argv) {
  fs::path out;
  bool cleanup = false;
  if (argc > 1) {
    out = argv[1];
  } else {
    std::string tmpl =
        (fs::temp_directory_path() / "td_memmap_example_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return 1;
    out = tmpl;
    cleanup = true;
  }

  // --- 1. Write a dict as a memmap directory --------------------------------
  TensorDict td({{"obs", torch::arange(12, torch::kFloat32).reshape({4, 3})},
                 {"action", torch::tensor({0, 1, 1, 0}, torch::kInt64)},
                 {"done", torch::tensor({false, false, false, true})},
                 {{"next", "obs"}, torch::ones({4, 3}) * 2}},
                {4});
  const fs::path dir = out / "rollout";
  td.memmap_(dir.string());  // in place: the leaves now live in the files
  std::cout << "wrote " << dir.string() << " (is_memmap=" << td.is_memmap()
            << ")\n";
  // As in Python, a memory-mapped dict is on the CPU and locked: a new key
  // would never reach the disk, so adding one is an error.
  check(td.is_locked() && td.device() == c10::Device(c10::kCPU),
        "memmap_ locks the dict on the CPU");
  bool rejected = false;
  try {
    td.set("extra", torch::zeros({4}));
  } catch (const c10::Error&) {
    rejected = true;
  }
  check(rejected, "a memmapped dict rejects a new key");

  // --- 2. Check the files against the format --------------------------------
  check_level(dir, td);
  check(read_file(dir / "done.memmap") == std::string("\0\0\0\1", 4),
        "bool bytes");

  // --- 3. Reopen zero-copy and write a row straight into the files ----------
  TensorDict loaded = TensorDict::load_memmap(dir.string());
  check((loaded == td).all(), "load_memmap values");
  loaded[0] = TensorDict({{"obs", torch::full({3}, -1.0)},
                          {"action", torch::tensor(7)},
                          {"done", torch::tensor(true)},
                          {{"next", "obs"}, torch::zeros({3})}},
                         {});
  const float row0[] = {-1, -1, -1};
  check(read_file(dir / "obs.memmap").substr(0, 12) ==
            std::string(reinterpret_cast<const char*>(row0), 12),
        "row write reached the file");

  // --- 4. Preallocate on disk: memmap_like ----------------------------------
  TensorDict storage = td.memmap_like((out / "storage").string());
  check(!storage.any(), "memmap_like is zero-filled");

  // --- 4b. The directory as one .tdz archive (Python tensordict 0.14's) ------
  const std::string archive = (out / "rollout.tdz").string();
  TensorDict snap = td.memmap(archive);  // copy-on-write views into the file
  check((TensorDict::load_memmap(archive) == td).all(), "archive values");
  check(
      read_file(out / "rollout.tdz").substr(0, 2) == "PK" && !snap.is_locked(),
      "a zip file, whose dict is not locked (as in Python)");
  TensorDict live = TensorDict::load_memmap(archive);  // writes reach the file
  live[1] = loaded[0];
  tensordict::refresh_archive_checksums(archive);  // for unzip and zipfile
  check((TensorDict::load_memmap(archive, /*read_only=*/true)[1] == loaded[0])
            .all(),
        "row write reached the archive");

  // --- 5. One file: consolidate + save / load -------------------------------
  TensorDict packed = td.consolidate();
  check(packed.is_consolidated(), "consolidated");
  packed.save((out / "rollout.td").string());
  check((TensorDict::load((out / "rollout.td").string()) == td).all(),
        "save/load");

  // --- 6. For torch.load: pickle_save ---------------------------------------
  std::vector<char> bytes = tensordict::pickle_save(td);
  std::ofstream((out / "rollout.pt").string(), std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  check(bytes.size() > 2 && bytes[0] == 'P' && bytes[1] == 'K',
        "torch.save zip format");

  // --- 7. A replay buffer that TorchRL loads, and one that TorchRL dumped ---
  {
    using tensordict::PrioritizedSampler;
    using tensordict::ReplayBuffer;
    using tensordict::ReplayBufferOptions;
    const std::string actor_rb = (out / "actor_rb").string();
    ReplayBuffer rb(ReplayBufferOptions(1000).storage_dir(actor_rb).sampler(
        PrioritizedSampler().alpha(0.7).beta(0.5)));
    for (int step = 0; step < 3; ++step) {
      torch::Tensor obs = torch::randn({100, 4});
      rb.extend(
          TensorDict({{"obs", obs},
                      {"action", torch::randint(2, {100})},
                      {{"next", "obs"}, obs + 1},
                      {{"next", "done"}, torch::zeros({100, 1}, torch::kBool)}},
                     {100}));
    }
    auto [batch, info] = rb.sample(64);
    rb.update_priority(info.index, torch::rand({64}));
    // TorchRL's files are there and current.
    auto json_of = [&](const char* rel) {
      return nlohmann::json::parse(read_file(fs::path(actor_rb) / rel));
    };
    check(
        json_of("storage/storage_metadata.json")["len"] == 300 &&
            json_of("writer/metadata.json")["cursor"] == 300 &&
            json_of("sampler/sampler_metadata.json")["_max_capacity"] == 1000 &&
            fs::file_size(fs::path(actor_rb) / "sampler/sumtree.memmap") ==
                1000 * sizeof(double),
        "TorchRL's replay-buffer files");
  }

  // --- 8. Non-tensor data: Python's NonTensorData ----------------------------
  {
    TensorDict ep({{"obs", torch::zeros({4, 3})}}, {4});
    ep.set_non_tensor("task", "walk");  // every row: "walk"
    ep.set_non_tensor({"info", "seed"}, 7);
    ep.memmap((out / "episode").string());
    const auto meta =
        nlohmann::json::parse(read_file(out / "episode/task/meta.json"));
    check(meta["data"] == "walk" &&
              meta["_type"] == "<class 'tensordict.tensorclass.NonTensorData'>",
          "NonTensorData in Python's format");
    TensorDict back = TensorDict::load_memmap((out / "episode").string());
    check(back.get_non_tensor("task") == "walk" &&
              back.get_non_tensor({"info", "seed"}) == 7,
          "non-tensor data round trip");
    std::cout << back << "\n";
  }

  std::cout << td << "\n";
  if (cleanup) remove_tree(out.string());
  if (failures != 0) {
    std::cerr << failures << " check(s) failed\n";
    return 1;
  }
  std::cout << "all format checks passed\n";
  return 0;
}
