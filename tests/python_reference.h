// Running the reference Python tensordict and TorchRL from the interop tests
// (python_*_test.cpp, the PythonReference suite).
//
// ../shared/python-reference/setup.sh makes tensordict and TorchRL 0.4.0
// importable on the host, and setup-newest.sh makes 0.14.0 importable inside
// a Debian sid root; each prints, last, the command prefix that runs it (such
// as `PYTHONPATH=~/.cache/tensordict-pyref/py /usr/bin/python3`). The tests
// run it from the environment variable TENSORDICT_PYREF and are skipped when
// it is not set, so `./dev test` never depends on Python. CI runs them
// against both versions. Where the two versions behave differently, a test
// asks `TensordictAtLeast` which one it talks to.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fs_util.h"
#include "test_paths.h"

namespace tensordict_test {

inline constexpr const char* kSkipMessage =
    "TENSORDICT_PYREF is not set: run ../shared/python-reference/setup.sh "
    "(or setup-newest.sh in the sid root) and set TENSORDICT_PYREF to the "
    "command prefix it prints last";

// The command prefix that runs the reference Python, or "" when unset.
// USE_LIBUV=0 comes first: torch >= 2.4's TCPStore asks for libuv, which
// Debian's torch is built without (torch 1.13 ignores the variable).
inline std::string PyRef() {
  const char* p = std::getenv("TENSORDICT_PYREF");
  return p == nullptr || *p == '\0' ? std::string()
                                    : "USE_LIBUV=0 " + std::string(p);
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs the Python `script` with `args` (paths without single quotes) under
// the reference; its output (stdout and stderr) goes to `output` when given.
// Adds a test failure with Python's output when it fails.
inline bool RunPython(const std::string& script,
                      const std::vector<std::string>& args,
                      std::string* output = nullptr) {
  TempDir tmp("td_pyref");
  const std::string file = tmp / "script.py";
  WriteFile(file, script);
  std::string cmd = PyRef() + " -W ignore '" + file + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run: " << cmd;
    return false;
  }
  std::string out;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (output != nullptr) *output = out;
  if (status != 0) {
    ADD_FAILURE() << "the reference Python failed (status " << status
                  << "): " << cmd << "\n"
                  << out;
    return false;
  }
  return true;
}

// Whether the reference's tensordict is at least version major.minor (asked
// once).
inline bool TensordictAtLeast(int major, int minor) {
  static const std::vector<int> version = [] {
    std::string out;
    if (!RunPython("import tensordict; print(tensordict.__version__)", {},
                   &out)) {
      return std::vector<int>{0, 0};
    }
    int ma = 0;
    int mi = 0;
    if (std::sscanf(out.c_str(), "%d.%d", &ma, &mi) != 2) {
      ADD_FAILURE() << "cannot read tensordict's version from: " << out;
    }
    return std::vector<int>{ma, mi};
  }();
  return version[0] > major || (version[0] == major && version[1] >= minor);
}

// The ```python block after the marker `<!-- ci: python <name> -->` in the
// tutorial `docs/tutorials/<tutorial>`, with `from` replaced by `to`.
inline std::string TutorialPython(const std::string& tutorial,
                                  const std::string& name,
                                  const std::string& from,
                                  const std::string& to) {
  const std::string md = ReadFile(tensordict_test::TestDataDir() +
                                  "/../../docs/tutorials/" + tutorial);
  const std::string marker = "<!-- ci: python " + name + " -->\n```python\n";
  const size_t start = md.find(marker);
  if (start == std::string::npos) {
    ADD_FAILURE() << "the tutorial has no block " << marker;
    return std::string();
  }
  const size_t begin = start + marker.size();
  std::string code = md.substr(begin, md.find("```", begin) - begin);
  for (size_t at = code.find(from); at != std::string::npos;
       at = code.find(from, at + to.size())) {
    code.replace(at, from.size(), to);
  }
  return code;
}

}  // namespace tensordict_test
