// The transformers side of the interop tests (tests/fixtures/hf_fixtures.py): written once per
// build directory (by ctest's hf_fixtures step, or here when missing); `skip` says which
// Python package is missing when it cannot run.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "nanochat/common/files.h"
#include "test_util.h"

struct HfFixtures {
  std::string dir, skip;
  nlohmann::json expected;
};

inline const std::string& hf_fixtures_script() {
  static const std::string s = std::string(NANOCHAT_SOURCE_DIR) + "/tests/fixtures/hf_fixtures.py";
  return s;
}

inline const HfFixtures& hf_fixtures() {
  static const HfFixtures f = [] {
    HfFixtures f;
    f.dir = NANOCHAT_HF_FIXTURES;
    if (!nanochat::path_exists(f.dir + "/expected.json")) {
      CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + hf_fixtures_script() + " write " + f.dir);
      if (r.rc == 77) return f.skip = r.err, f;
      if (r.rc != 0) throw std::runtime_error("hf_fixtures.py failed: " + r.err);
    }
    f.expected = nlohmann::json::parse(read_file(f.dir + "/expected.json"));
    return f;
  }();
  return f;
}

#define NEEDS_TRANSFORMERS() \
  if (!hf_fixtures().skip.empty()) GTEST_SKIP() << hf_fixtures().skip
