// PyRandom against CPython itself: the venv's python3 prints random.Random(seed)'s
// getrandbits, random(), shuffle and sample outputs for many seeds and sizes (both sample
// branches: the pool list for small populations, the set of picks for large ones), and the
// exact calls CORE makes (Random(1337).shuffle, Random(1234+idx).sample of the others).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "nanochat/common/error.h"
#include "nanochat/common/py_random.h"
#include "test_util.h"

using namespace nanochat;

static nlohmann::json python_json(const std::string& code) {
  std::string dir = make_temp_dir(), path = dir + "/x.py";
  { std::ofstream(path) << code; }
  auto r = run_shell(std::string(NANOCHAT_PYTHON) + " " + path);
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(r.rc, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

static const char* kScript = R"PY(
import json, random
seeds = [0, 1, 2, 42, 1337, 1234, 1235, 99999, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 7, 2**40 + 3, 2**62 + 11, -5]
out = []
for s in seeds:
    r = random.Random(s)
    bits = [r.getrandbits(k) for k in (1, 5, 31, 32, 33, 40, 63, 64)]
    fl = [r.random() for _ in range(3)]
    shuffles = {}
    for n in (0, 1, 2, 3, 10, 50, 1000):
        x = list(range(n)); random.Random(s).shuffle(x); shuffles[n] = x
    samples = []
    for n, k in ((5, 0), (5, 5), (10, 3), (21, 10), (30, 10), (84, 10), (86, 10), (200, 3), (1000, 10), (5000, 6), (100000, 10)):
        samples.append([n, k, random.Random(s).sample(range(n), k)])
    out.append(dict(seed=s, bits=bits, floats=fl, shuffles=shuffles, samples=samples))
# CORE's draws: the shuffled task and few-shot examples of several items
core = []
for n, k in ((20, 3), (500, 10), (10042, 10), (12, 10)):
    for idx in (0, 1, 7, n - 1):
        avail = [i for i in range(n) if i != idx]
        core.append([n, k, idx, random.Random(1234 + idx).sample(avail, k)])
data = list(range(2000)); random.Random(1337).shuffle(data)
print(json.dumps(dict(seeds=out, core=core, core_shuffle=data)))
)PY";

TEST(PyRandom, MatchesCPython) {
  auto ref = python_json(kScript);
  for (const auto& s : ref["seeds"]) {
    int64_t seed = s["seed"].get<int64_t>();
    SCOPED_TRACE("seed " + std::to_string(seed));
    PyRandom r(seed);
    int ks[] = {1, 5, 31, 32, 33, 40, 63, 64};
    for (int i = 0; i < 8; i++) EXPECT_EQ(r.getrandbits(ks[i]), s["bits"][i].get<uint64_t>()) << "k=" << ks[i];
    for (int i = 0; i < 3; i++) EXPECT_EQ(r.random(), s["floats"][i].get<double>());
    for (auto& [n, expected] : s["shuffles"].items()) {
      std::vector<int64_t> x(std::stoi(n));
      for (size_t i = 0; i < x.size(); i++) x[i] = (int64_t)i;
      PyRandom(seed).shuffle(x);
      EXPECT_EQ(x, expected.get<std::vector<int64_t>>()) << "shuffle n=" << n;
    }
    for (const auto& smp : s["samples"]) {
      int64_t n = smp[0], k = smp[1];
      EXPECT_EQ(PyRandom(seed).sample_indices(n, k), smp[2].get<std::vector<int64_t>>())
          << "sample n=" << n << " k=" << k;
    }
  }
  for (const auto& c : ref["core"]) {
    int64_t n = c[0], k = c[1], idx = c[2];
    std::vector<int64_t> avail;
    for (int64_t i = 0; i < n; i++)
      if (i != idx) avail.push_back(i);
    EXPECT_EQ(PyRandom(1234 + idx).sample(avail, k), c[3].get<std::vector<int64_t>>()) << n << " " << idx;
  }
  std::vector<int64_t> data(2000);
  for (size_t i = 0; i < data.size(); i++) data[i] = (int64_t)i;
  PyRandom(1337).shuffle(data);
  EXPECT_EQ(data, ref["core_shuffle"].get<std::vector<int64_t>>());
}

TEST(PyRandom, SampleLargerThanPopulationIsAnError) {
  PyRandom r(1);
  EXPECT_THROW(r.sample_indices(3, 4), Error);
  EXPECT_THROW(r.sample_indices(3, -1), Error);
  EXPECT_EQ(r.randbelow(0), 0u);
}
