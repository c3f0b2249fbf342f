// Tests for the checkpoint module: safetensors against Python's safetensors package, .pt
// import against Python's torch.save (tests/fixtures/checkpoint_fixtures.py writes the
// files and the expected values), corrupted and malicious inputs, and the directory, step
// and completeness rules of upstream's checkpoint_manager.py.

#include <gtest/gtest.h>

#include <caffe2/serialize/inline_container.h>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nanochat/checkpoint.h"
#include "nanochat/checkpoint/safetensors.h"
#include "nanochat/checkpoint/torch_pickle.h"
#include "nanochat/common/error.h"
#include "nanochat/common/files.h"
#include "test_util.h"

using namespace nanochat;
using json = nlohmann::json;

namespace {

const std::string kScript = std::string(NANOCHAT_SOURCE_DIR) + "/tests/fixtures/checkpoint_fixtures.py";

// the Python side's files: written by ctest's checkpoint_fixtures step, or here when missing
const std::string& fixtures() {
  static const std::string dir = [] {
    std::string d = NANOCHAT_CHECKPOINT_FIXTURES;
    if (!path_exists(d + "/expected.json")) {
      CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " write " + d);
      if (r.rc != 0) throw std::runtime_error("fixture script failed: " + r.err);
    }
    return d;
  }();
  return dir;
}
const json& expected() {
  static const json e = json::parse(read_file(fixtures() + "/expected.json"));
  return e;
}

const char* py_dtype(torch::Dtype d) {
  switch (d) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    case torch::kFloat64: return "float64";
    case torch::kInt64: return "int64";
    case torch::kInt32: return "int32";
    case torch::kUInt8: return "uint8";
    case torch::kBool: return "bool";
    default: return "?";
  }
}

// t equals Python's {"dtype", "shape", "values"} exactly (every dtype here is exact in double)
void expect_tensor(const std::string& name, const torch::Tensor& t, const json& want) {
  SCOPED_TRACE(name);
  EXPECT_EQ(py_dtype(t.scalar_type()), want["dtype"].get<std::string>());
  EXPECT_EQ(t.sizes().vec(), want["shape"].get<std::vector<int64_t>>());
  const json& values = want["values"];
  ASSERT_EQ((size_t)t.numel(), values.size());
  if (t.scalar_type() == torch::kInt64) {
    auto flat = t.contiguous().view(-1);
    for (int64_t i = 0; i < t.numel(); i++) EXPECT_EQ(flat[i].item<int64_t>(), values[i].get<int64_t>()) << i;
  } else {
    auto flat = t.to(torch::kFloat64).contiguous().view(-1);
    for (int64_t i = 0; i < t.numel(); i++) EXPECT_EQ(flat[i].item<double>(), values[i].get<double>()) << i;
  }
}

const torch::Tensor& find(const NamedTensors& ts, const std::string& name) {
  for (const auto& [n, t] : ts)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// runs f, expecting one nanochat::Error whose message contains every needle
template <typename F>
void expect_error(F f, std::vector<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted one with '" << needles[0] << "'";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

// the tensors checkpoint_fixtures.py expected_cpp() defines with the same formulas
NamedTensors cpp_tensors() {
  auto f32 = torch::kFloat32;
  return {
      {"a.f32", torch::arange(12, f32).reshape({3, 4}) / 7},
      {"b.bf16", (torch::arange(6, f32) * 0.3 - 1).to(torch::kBFloat16).reshape({2, 3})},
      {"c.f16", (torch::arange(5, f32) / 3).to(torch::kFloat16)},
      {"d.i64", torch::arange(4, torch::kInt64) * (int64_t(1) << 40) - 5},
      {"e.empty", torch::zeros({0, 3})},
      {"f.scalar", torch::tensor(-2.5f)},
      {"g.bool", torch::tensor({true, false})},
  };
}

// [8-byte length][header][data] with any header text, for forged files
std::string write_raw(const std::string& dir, const std::string& name, const std::string& header,
                      const std::string& data, uint64_t length = UINT64_MAX) {
  uint64_t n = length == UINT64_MAX ? header.size() : length;
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += header + data;
  std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

// ---- safetensors -------------------------------------------------------------------------

TEST(Safetensors, PythonFileLoadsIdentically) {
  SafetensorsFile f = safetensors_load(fixtures() + "/py.safetensors");
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"who", "python"}};
  EXPECT_EQ(f.metadata, meta);
  const json& want = expected()["py.safetensors"];
  ASSERT_EQ(f.tensors.size(), want.size());
  for (const auto& [name, t] : f.tensors) {
    ASSERT_TRUE(want.contains(name)) << name;
    expect_tensor(name, t, want[name]);
  }
}

TEST(Safetensors, OursLoadsInPythonIdentically) {
  std::string path = temp_dir() + "/ours.safetensors";
  safetensors_save(path, cpp_tensors(), {{"format", "pt"}, {"step", "42"}});
  CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + kScript + " check " + path);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("OK"), std::string::npos);
  // the header is padded with spaces so the data starts 8-byte aligned
  std::string bytes = read_file(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
}

TEST(Safetensors, RoundTripKeepsOrderDtypesAndViews) {
  NamedTensors in = cpp_tensors();
  torch::Tensor base = torch::arange(20, torch::kFloat32).reshape({4, 5});
  in.emplace_back("view.t", base.t());                 // non-contiguous
  in.emplace_back("view.slice", base.slice(1, 1, 4));  // offset + stride
  in.emplace_back("z.f64", torch::tensor({1.0 / 3, -2.0}, torch::kFloat64));
  in.emplace_back("y.i8", torch::tensor({-128, 127}, torch::kInt8));
  std::string path = temp_dir() + "/rt.safetensors";
  safetensors_save(path, in);
  SafetensorsFile out = safetensors_load(path);
  EXPECT_TRUE(out.metadata.empty());
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); i++) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    EXPECT_EQ(out.tensors[i].second.scalar_type(), in[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(out.tensors[i].second, in[i].second)) << in[i].first;
  }
}

TEST(Safetensors, WriterRefusesBadInputAndKeepsTheOldFile) {
  std::string path = temp_dir() + "/keep.safetensors";
  safetensors_save(path, cpp_tensors());
  std::string before = read_file(path);
  expect_error([&] { safetensors_save(path, {{"a", torch::ones(2)}, {"a", torch::ones(2)}}); }, {path, "'a'", "twice"});
  expect_error([&] { safetensors_save(path, {{"c", torch::ones(2, torch::kComplexFloat)}}); }, {path, "'c'", "dtype"});
  expect_error([&] { safetensors_save(path, {{"__metadata__", torch::ones(2)}}); }, {path, "reserved"});
  EXPECT_EQ(read_file(path), before);
}

TEST(Safetensors, CorruptFilesGiveOneClearError) {
  std::string d = temp_dir();
  std::string f8(8, '\0');
  auto hdr = [](const std::string& entries) { return "{" + entries + "}"; };
  std::string a8 = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  // overlapping spans
  expect_error(
      [&] {
        safetensors_load(write_raw(d, "overlap", hdr(a8 + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})"),
                                   std::string(12, '\0')));
      },
      {"overlap", "'b'", "'a'", "/overlap"});
  // span past the end of the file
  expect_error(
      [&] {
        safetensors_load(write_raw(d, "past", hdr(R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})"), f8));
      },
      {"'a'", "past the end", "/past"});
  // gap and trailing bytes
  expect_error(
      [&] {
        safetensors_load(write_raw(d, "gap", hdr(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), f8));
      },
      {"'a'", "gap"});
  expect_error([&] { safetensors_load(write_raw(d, "trail", hdr(a8), f8 + "xx")); }, {"2 bytes after"});
  // bad JSON, not an object, unknown dtype, shape vs span, bad offsets, duplicate name
  expect_error([&] { safetensors_load(write_raw(d, "json", "{\"a\": [1,", f8)); }, {"/json", "not valid JSON"});
  expect_error([&] { safetensors_load(write_raw(d, "arr", "[1, 2]  ", "")); }, {"not a JSON object"});
  expect_error(
      [&] {
        safetensors_load(write_raw(d, "dtype", hdr(R"("a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]})"), f8));
      },
      {"/dtype", "'a'", "unknown dtype", "F31"});
  expect_error(
      [&] {
        safetensors_load(write_raw(d, "shape", hdr(R"("w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), f8));
      },
      {"'w'", "needs 12 bytes", "span 8"});
  expect_error(
      [&] {
        safetensors_load(write_raw(d, "neg", hdr(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), f8));
      },
      {"'a'", "non-negative"});
  expect_error(
      [&] {
        safetensors_load(write_raw(
            d, "huge_shape", hdr(R"("a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"), f8));
      },
      {"'a'", "too large"});
  expect_error([&] { safetensors_load(write_raw(d, "dup", hdr(a8 + "," + a8), f8)); }, {"'a'", "twice"});
  expect_error([&] { safetensors_load(write_raw(d, "meta", hdr(R"("__metadata__":{"k":1},)" + a8), f8)); },
               {"__metadata__", "'k'"});
  // header length: huge, past the file, and a file shorter than the length field
  expect_error([&] { safetensors_load(write_raw(d, "hugelen", hdr(a8), f8, uint64_t(1) << 60)); },
               {"header length", "/hugelen"});
  expect_error([&] { safetensors_load(write_raw(d, "longlen", hdr(a8), f8, 1000)); }, {"does not fit"});
  std::ofstream(d + "/tiny", std::ios::binary) << "abc";
  expect_error([&] { safetensors_load(d + "/tiny"); }, {"/tiny", "truncated"});
  expect_error([&] { safetensors_load(d + "/does_not_exist"); }, {"cannot open", "does_not_exist"});
}

TEST(Safetensors, EveryTruncationIsAnError) {
  std::string d = temp_dir(), path = d + "/full.safetensors";
  safetensors_save(path, cpp_tensors());
  std::string bytes = read_file(path);
  for (size_t len = 0; len < bytes.size(); len++) {
    std::ofstream(d + "/cut", std::ios::binary | std::ios::trunc) << bytes.substr(0, len);
    EXPECT_THROW(safetensors_load(d + "/cut"), Error) << "length " << len;
  }
}

// random byte flips and cuts: every outcome is a good load or an Error, never a crash
TEST(Safetensors, FuzzedFilesNeverCrash) {
  std::string d = temp_dir(), path = d + "/seed.safetensors";
  safetensors_save(path, cpp_tensors(), {{"format", "pt"}});
  std::string seed = read_file(path);
  std::mt19937_64 rng(1234);
  int loaded = 0, errors = 0;
  for (int it = 0; it < 800; it++) {
    std::string bytes = seed;
    int flips = 1 + rng() % 4;
    for (int k = 0; k < flips; k++) {
      // mostly in the length field and the header, where the parser lives
      size_t at = rng() % 4 ? rng() % std::min<size_t>(bytes.size(), 8 + 64 + rng() % 400) : rng() % bytes.size();
      bytes[at] = rng() % 3 ? char(rng()) : "{}[],:\"0123456789 "[rng() % 18];
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    std::ofstream(d + "/fuzz", std::ios::binary | std::ios::trunc) << bytes;
    try {
      safetensors_load(d + "/fuzz");
      loaded++;
    } catch (const Error&) {
      errors++;
    }
  }
  EXPECT_GT(errors, 250);
  EXPECT_GT(loaded, 0);  // flips in the data only change values
}

// ---- .pt import --------------------------------------------------------------------------

TEST(TorchPickle, StateDictFromTorchSave) {
  NamedTensors sd = torch_pickle_load_state_dict(fixtures() + "/state.pt");
  const json& want = expected()["state.pt"];
  std::vector<std::string> order;
  for (const auto& [name, t] : sd) {
    order.push_back(name);
    expect_tensor(name, t, want[name]);
  }
  EXPECT_EQ(order, expected()["state.pt.order"].get<std::vector<std::string>>());
  // tied weights keep sharing one storage, as torch.load gives them
  EXPECT_EQ(find(sd, "tied").data_ptr(), find(sd, "wte.weight").data_ptr());
  EXPECT_EQ(find(sd, "view.strided").strides().vec(), (std::vector<int64_t>{6, 2}));
  // build_model step 3
  checkpoint_strip_compile_prefix(sd);
  EXPECT_TRUE(torch::equal(find(sd, "x"), torch::tensor({1.5f, -2.0f})));
}

TEST(TorchPickle, PlainDict) {
  NamedTensors sd = torch_pickle_load_state_dict(fixtures() + "/plain.pt");
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "a");
  EXPECT_TRUE(torch::equal(sd[0].second, torch::ones(2)));
  EXPECT_EQ(sd[1].first, "b");
  EXPECT_TRUE(torch::equal(sd[1].second, torch::zeros(3, torch::kInt64)));
}

TEST(TorchPickle, OptimizerStateDictAsTreeAndTensors) {
  TorchPickle p = torch_pickle_load(fixtures() + "/optim.pt");
  EXPECT_EQ(json::parse(p.tree.dump()), expected()["optim.pt.tree"]);
  const json& want = expected()["optim.pt"];
  EXPECT_EQ(p.tensors.size(), want.size());
  for (const auto& [name, t] : p.tensors) {
    ASSERT_TRUE(want.contains(name)) << name;
    expect_tensor(name, t, want[name]);
  }
  expect_error([&] { torch_pickle_load_state_dict(fixtures() + "/optim.pt"); },
               {"optim.pt", "'state'", "not a tensor"});
}

TEST(TorchPickle, RefusesCodeExecution) {
  expect_error([&] { torch_pickle_load(fixtures() + "/evil.pt"); }, {"evil.pt", "posix.system", "refusing"});
  EXPECT_FALSE(path_exists(fixtures() + "/pwned"));
  expect_error([&] { torch_pickle_load(fixtures() + "/counter.pt"); }, {"counter.pt", "collections.Counter"});
}

TEST(TorchPickle, NotAnArchive) {
  std::string d = temp_dir();
  std::ofstream(d + "/text.pt") << "hello, world";
  expect_error([&] { torch_pickle_load(d + "/text.pt"); }, {"text.pt", "not a torch.save zip"});
  std::string bytes = read_file(fixtures() + "/state.pt");
  std::ofstream(d + "/cut.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  expect_error([&] { torch_pickle_load(d + "/cut.pt"); }, {"cut.pt"});
}

namespace {
// a torch.save-style zip around any data.pkl, with one storage record data/0 = {1.5, -4}
std::string write_archive(const std::string& path, const std::string& pkl) {
  caffe2::serialize::PyTorchStreamWriter w(path);
  float storage[2] = {1.5f, -4.0f};
  w.writeRecord("data.pkl", pkl.data(), pkl.size());
  w.writeRecord("data/0", storage, sizeof storage);
  w.writeEndOfFile();
  return path;
}
}  // namespace

TEST(TorchPickle, ForgedTensorsAreBoundsChecked) {
  std::string d = temp_dir();
  auto archive = [&](const std::string& name) {
    return write_archive(d + "/" + name + ".pt", read_file(fixtures() + "/forged_" + name + ".pkl"));
  };
  NamedTensors ok = torch_pickle_load_state_dict(archive("ok"));
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_TRUE(torch::equal(ok[0].second, torch::tensor({-4.0f})));
  expect_error([&] { torch_pickle_load(archive("oob")); }, {"oob.pt", "element 2 of a storage of 2"});
  expect_error([&] { torch_pickle_load(archive("oob_stride")); }, {"element 2 of a storage of 2"});
  expect_error([&] { torch_pickle_load(archive("offset")); }, {"storage offset 5"});
  expect_error([&] { torch_pickle_load(archive("numel")); }, {"data/0 holds 8 bytes, not 3 elements"});
  expect_error([&] { torch_pickle_load(archive("missing")); }, {"data/7 is missing"});
}

// byte flips inside data.pkl of a real state_dict: a good load or an Error, never a crash
TEST(TorchPickle, FuzzedPicklesNeverCrash) {
  std::string seed;
  {
    caffe2::serialize::PyTorchStreamReader r(fixtures() + "/state.pt");
    auto [ptr, n] = r.getRecord("data.pkl");
    seed.assign(static_cast<const char*>(ptr.get()), n);
  }
  std::string d = temp_dir();
  std::mt19937_64 rng(99);
  int errors = 0;
  for (int it = 0; it < 300; it++) {
    std::string pkl = seed;
    for (int k = 0, flips = 1 + rng() % 3; k < flips; k++) pkl[rng() % pkl.size()] = char(rng());
    if (rng() % 6 == 0) pkl.resize(rng() % pkl.size());
    write_archive(d + "/f.pt", pkl);
    try {
      torch_pickle_load(d + "/f.pt");
    } catch (const Error&) {
      errors++;
    }
  }
  EXPECT_GT(errors, 100);
}

// byte flips anywhere in a torch.save archive (zip directory, headers, records): a good load
// or an Error, never a crash
TEST(TorchPickle, FuzzedArchivesNeverCrash) {
  std::string seed = read_file(fixtures() + "/state.pt"), d = temp_dir();
  std::mt19937_64 rng(7);
  int errors = 0;
  for (int it = 0; it < 300; it++) {
    std::string bytes = seed;
    for (int k = 0, flips = 1 + rng() % 3; k < flips; k++) bytes[rng() % bytes.size()] = char(rng());
    std::ofstream(d + "/z.pt", std::ios::binary | std::ios::trunc) << bytes;
    try {
      torch_pickle_load(d + "/z.pt");
    } catch (const Error&) {
      errors++;
    }
  }
  EXPECT_GT(errors, 0);
}

// ---- checkpoint directories, steps, completeness -------------------------------------------

namespace {
struct BaseDir {
  std::string dir = temp_dir();
  BaseDir() { setenv("NANOCHAT_BASE_DIR", dir.c_str(), 1); }
  ~BaseDir() { unsetenv("NANOCHAT_BASE_DIR"); }
};

nlohmann::ordered_json meta_for(int64_t step) {
  nlohmann::ordered_json m;
  m["step"] = step;
  m["val_bpb"] = 0.75;
  m["model_config"] = {{"sequence_len", 64}, {"vocab_size", 300},       {"n_layer", 2}, {"n_head", 1}, {"n_kv_head", 1},
                       {"n_embd", 128},      {"window_pattern", "SSSL"}};
  return m;
}

NamedTensors model_for(int64_t step) {
  return {{"transformer.wte.weight", torch::full({3, 2}, (float)step).to(torch::kBFloat16)},
          {"lm_head.weight", torch::arange(6, torch::kFloat32).reshape({2, 3}) + step},
          {"resid_lambdas", torch::ones({2})}};
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  CommandResult r = run_shell("ls -A " + dir);
  std::stringstream ss(r.out);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}
}  // namespace

TEST(Checkpoint, Directories) {
  BaseDir base;
  EXPECT_EQ(checkpoint_dir("base", "d4"), base.dir + "/base_checkpoints/d4");
  EXPECT_EQ(checkpoint_dir("sft", "d4"), base.dir + "/chatsft_checkpoints/d4");
  EXPECT_EQ(checkpoint_dir("rl", "x"), base.dir + "/chatrl_checkpoints/x");
  expect_error([&] { checkpoint_dir("mid", "d4"); }, {"'mid'", "base, sft or rl"});
  EXPECT_EQ(checkpoint_model_path("D", 5), "D/model_000005.safetensors");
  EXPECT_EQ(checkpoint_meta_path("D", 1234567), "D/meta_1234567.json");
  EXPECT_EQ(checkpoint_optim_path("D", 5, 3), "D/optim_000005_rank3.safetensors");
  EXPECT_EQ(checkpoint_optim_json_path("D", 5, 3), "D/optim_000005_rank3.json");
}

TEST(Checkpoint, LargestTagThenNewest) {
  std::string root = temp_dir() + "/base_checkpoints";
  expect_error([&] { checkpoint_find_largest_tag(root); }, {root, "does not exist"});
  make_dirs(root);
  expect_error([&] { checkpoint_find_largest_tag(root); }, {root, "no model tag"});
  for (const char* t : {"dx", "old", "new"}) make_dirs(root + "/" + t);
  std::ofstream(root + "/d99") << "a file, not a tag";
  auto set_mtime = [&](const char* tag, time_t t) {
    struct timespec times[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, (root + "/" + tag).c_str(), times, 0), 0);
  };
  set_mtime("old", 1000);
  set_mtime("new", 1500);
  set_mtime("dx", 2000);
  EXPECT_EQ(checkpoint_find_largest_tag(root), "dx");  // no d<digits>: most recently modified
  for (const char* t : {"d4", "d12_jan29", "d9"}) make_dirs(root + "/" + t);
  EXPECT_EQ(checkpoint_find_largest_tag(root), "d12_jan29");  // 12 > 9 > 4, not by string
}

TEST(Checkpoint, SaveLoadAndIncompleteStepsIgnored) {
  BaseDir base;
  std::string dir = checkpoint_dir("base", "d2");
  for (int64_t step : {5, 10}) {
    checkpoint_save_model(dir, step, model_for(step), meta_for(step));
    for (int r = 0; r < 2; r++)
      checkpoint_save_optim(dir, step, r, {{"m", torch::full({2}, (float)(step + r))}}, {{"step", step}, {"rank", r}});
    checkpoint_mark_complete(dir, step, 2);
  }
  // step 15 crashed before rank 1's optimizer state: no marker, so it does not count
  checkpoint_save_model(dir, 15, model_for(15), meta_for(15));
  checkpoint_save_optim(dir, 15, 0, {{"m", torch::ones(2)}}, {{"step", 15}});
  expect_error([&] { checkpoint_mark_complete(dir, 15, 2); }, {"optim_000015_rank1.safetensors", "missing"});
  EXPECT_FALSE(checkpoint_is_complete(dir, 15));
  EXPECT_EQ(checkpoint_list_steps(dir, "model_", ".safetensors"), (std::vector<int64_t>{5, 10, 15}));
  EXPECT_EQ(checkpoint_find_last_step(dir), 10);
  expect_error([&] { checkpoint_load_model(dir, 15); }, {"step 15", "incomplete"});
  expect_error([&] { checkpoint_load_model(dir, 7); }, {"no checkpoint step 7"});

  CheckpointRef ref = checkpoint_locate("base");
  EXPECT_EQ(ref.dir, dir);
  EXPECT_EQ(ref.step, 10);
  EXPECT_EQ(checkpoint_locate("base", "d2", 5).step, 5);
  expect_error([&] { checkpoint_locate("base", "d3"); }, {"d3", "--model-tag"});

  ModelCheckpoint ck = checkpoint_load_model(dir, 10);
  NamedTensors want = model_for(10);
  ASSERT_EQ(ck.tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); i++) {
    EXPECT_EQ(ck.tensors[i].first, want[i].first);
    EXPECT_EQ(ck.tensors[i].second.scalar_type(), want[i].second.scalar_type());
    EXPECT_TRUE(torch::equal(ck.tensors[i].second, want[i].second));
  }
  EXPECT_EQ(ck.meta, meta_for(10));
  // json.dump(meta, indent=2): keys in the given order, two-space indent
  EXPECT_EQ(read_file(checkpoint_meta_path(dir, 10)).substr(0, 16), "{\n  \"step\": 10,\n");

  auto opt = checkpoint_load_optim(dir, 10, 1);
  ASSERT_TRUE(opt.has_value());
  EXPECT_TRUE(torch::equal(find(opt->tensors, "m"), torch::full({2}, 11.0f)));
  EXPECT_EQ(opt->state["rank"], 1);
  EXPECT_FALSE(checkpoint_load_optim(dir, 10, 2).has_value());

  // rewriting step 15 completely makes it the latest
  checkpoint_save_optim(dir, 15, 1, {{"m", torch::ones(2)}}, {{"step", 15}});
  checkpoint_mark_complete(dir, 15, 2);
  EXPECT_EQ(checkpoint_find_last_step(dir), 15);
  // an RL-style checkpoint with no optimizer
  checkpoint_save_model(dir, 20, model_for(20), meta_for(20));
  checkpoint_mark_complete(dir, 20, 0);
  EXPECT_EQ(checkpoint_find_last_step(dir), 20);
}

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  BaseDir base;
  std::string dir = checkpoint_dir("sft", "d2");
  checkpoint_save_model(dir, 10, model_for(10), meta_for(10));
  checkpoint_mark_complete(dir, 10, 0);
  std::string model_before = read_file(checkpoint_model_path(dir, 10));
  std::vector<std::string> files_before = names_in(dir);

  NamedTensors bad = model_for(11);
  bad.emplace_back("z", torch::ones(2, torch::kComplexFloat));
  expect_error([&] { checkpoint_save_model(dir, 11, bad, meta_for(11)); }, {"'z'"});
  expect_error([&] { checkpoint_save_model(dir, 10, bad, meta_for(10)); }, {"'z'"});  // same step: untouched
  EXPECT_EQ(names_in(dir), files_before);  // no new file, no temp file left behind
  EXPECT_EQ(read_file(checkpoint_model_path(dir, 10)), model_before);
  EXPECT_EQ(checkpoint_find_last_step(dir), 10);

  // a done marker that lists a file that has gone: not complete
  unlink(checkpoint_meta_path(dir, 10).c_str());
  EXPECT_FALSE(checkpoint_is_complete(dir, 10));
  expect_error([&] { checkpoint_find_last_step(dir); }, {"no complete checkpoint", "10"});
}

TEST(Checkpoint, CorruptModelFileIsAnErrorNamingIt) {
  BaseDir base;
  std::string dir = checkpoint_dir("base", "d2");
  checkpoint_save_model(dir, 3, model_for(3), meta_for(3));
  checkpoint_mark_complete(dir, 3, 0);
  std::string path = checkpoint_model_path(dir, 3), bytes = read_file(path);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 5);
  expect_error([&] { checkpoint_load_model(dir, 3); }, {"model_000003.safetensors", "resid_lambdas", "past the end"});
}

TEST(Checkpoint, TensorChecksReportTheFirstMismatchByName) {
  NamedTensors loaded = model_for(1);
  std::vector<TensorSpec> spec = {{"transformer.wte.weight", {3, 2}, torch::kBFloat16},
                                  {"lm_head.weight", {2, 3}, torch::kFloat32},
                                  {"resid_lambdas", {2}, std::nullopt}};
  checkpoint_check_tensors(spec, loaded, "ck");
  auto changed = [&](size_t i, TensorSpec s) {
    auto copy = spec;
    copy[i] = s;
    return copy;
  };
  expect_error(
      [&] {
        checkpoint_check_tensors(changed(1, {"lm_head.weight", {3, 2}, torch::kFloat32}), loaded, "ck");
      },
      {"ck: tensor 'lm_head.weight' is [2, 3] Float but the model expects [3, 2] Float"});
  expect_error(
      [&] {
        checkpoint_check_tensors(changed(0, {"transformer.wte.weight", {3, 2}, torch::kFloat32}), loaded, "ck");
      },
      {"'transformer.wte.weight' is [3, 2] BFloat16"});
  expect_error(
      [&] {
        checkpoint_check_tensors(changed(2, {"x0_lambdas", {2}, std::nullopt}), loaded, "ck");
      },
      {"missing tensor 'x0_lambdas'"});
  loaded.emplace_back("extra.bias", torch::zeros({4}));
  expect_error([&] { checkpoint_check_tensors(spec, loaded, "ck"); }, {"unexpected tensor 'extra.bias' [4]"});
}

TEST(Checkpoint, VocabCheck) {
  checkpoint_check_vocab(meta_for(1), 300, "m");
  expect_error([&] { checkpoint_check_vocab(meta_for(1), 32768, "m"); }, {"vocab_size is 300", "32768"});
  expect_error([&] { checkpoint_check_vocab(nlohmann::ordered_json::object(), 300, "m"); },
               {"model_config.vocab_size"});
}

// upstream writes its meta with Python's json.dump, which writes non-finite floats as the bare
// words Infinity, -Infinity and NaN (e.g. min_val_bpb before the first evaluation)
TEST(Checkpoint, MetaWrittenByPythonJsonDumpIsRead) {
  std::string path = temp_dir() + "/meta_000005.json";
  CommandResult w = run_shell(std::string(NANOCHAT_PYTHON) +
                              " -c 'import json, sys; json.dump({"
                              "\"step\": 5, \"val_bpb\": float(\"nan\"), \"note\": \"NaN, -Infinity\\\" Infinity\", "
                              "\"loop_state\": {\"min_val_bpb\": float(\"inf\"), \"floor\": float(\"-inf\")}, "
                              "\"series\": [1.5, float(\"inf\")]}, open(sys.argv[1], \"w\"), indent=2)' " +
                              path);
  ASSERT_EQ(w.rc, 0) << w.err;
  std::string text = read_file(path);
  for (const char* word : {"\"val_bpb\": NaN,", "\"min_val_bpb\": Infinity", "-Infinity\n", "  Infinity\n"})
    ASSERT_NE(text.find(word), std::string::npos) << "json.dump did not write " << word << ":\n" << text;

  nlohmann::ordered_json meta = checkpoint_read_json(path);
  EXPECT_EQ(meta["step"], 5);
  EXPECT_TRUE(std::isnan(meta["val_bpb"].get<double>()));
  EXPECT_EQ(meta["note"], "NaN, -Infinity\" Infinity");  // the words inside a string stay text
  EXPECT_EQ(meta["loop_state"]["min_val_bpb"].get<double>(), INFINITY);
  EXPECT_EQ(meta["loop_state"]["floor"].get<double>(), -INFINITY);
  EXPECT_EQ(meta["series"][0].get<double>(), 1.5);
  EXPECT_EQ(meta["series"][1].get<double>(), INFINITY);
  EXPECT_EQ(checkpoint_meta_number(meta["loop_state"], "min_val_bpb", 0), INFINITY);

  // not Python's words: still invalid JSON, one error naming the file
  for (const char* bad : {"{\"a\": NaNx}", "{\"a\": -NaN}", "{\"a\": nan}", "{\"a\": inf}", "{\"a\": infinity}"})
    expect_error([&] { checkpoint_parse_json(bad, "m.json"); }, {"m.json", "not valid JSON"});
  expect_error([&] { checkpoint_parse_json("{\"a\": \"\\u0000Infinity\", \"b\": NaN}", "m.json"); },
               {"m.json", "\\u0000"});
  EXPECT_EQ(checkpoint_parse_json("{\"a\": \"\\u0000Infinity\"}", "m.json")["a"], std::string("\0Infinity", 9));
}

TEST(Checkpoint, OldCheckpointPatchesAndCasts) {
  nlohmann::ordered_json cfg = {{"n_layer", 3}};
  checkpoint_patch_config(cfg);
  EXPECT_EQ(cfg["window_pattern"], "L");
  cfg["window_pattern"] = "SSSL";
  checkpoint_patch_config(cfg);
  EXPECT_EQ(cfg["window_pattern"], "SSSL");

  NamedTensors ts = {{"w", torch::tensor({0.5f, -1.25f}).to(torch::kBFloat16)}, {"i", torch::arange(2)}};
  checkpoint_patch_tensors(ts, 3);
  EXPECT_TRUE(torch::equal(find(ts, "resid_lambdas"), torch::tensor({1.0f, 1.0f, 1.0f})));
  EXPECT_TRUE(torch::equal(find(ts, "x0_lambdas"), torch::tensor({0.0f, 0.0f, 0.0f})));
  ts[2].second = torch::full({3}, 2.0f);
  checkpoint_patch_tensors(ts, 3);  // present: untouched
  EXPECT_EQ(ts.size(), 4u);
  EXPECT_TRUE(torch::equal(find(ts, "resid_lambdas"), torch::full({3}, 2.0f)));

  checkpoint_cast_bf16_to_f32(ts);
  EXPECT_EQ(find(ts, "w").scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(find(ts, "w"), torch::tensor({0.5f, -1.25f})));
  EXPECT_EQ(find(ts, "i").scalar_type(), torch::kInt64);
}

// ==== parser bounds: hostile .pt and safetensors files from the fuzz corpus ==========
// tests/fuzz/make_seeds.py says how each regress-* file is built; each crashed, leaked or hung
// before the readers bounded nesting and expansion, and each is now one Error naming the file.

namespace {
const std::string kFuzzDir = std::string(NANOCHAT_SOURCE_DIR) + "/tests/fuzz";
}  // namespace

TEST(ParserBounds, DeepPickleIsAnErrorNotAStackOverflow) {
  // 50000 nested lists: the error used to come out fine, then freeing the chain recursed
  std::string d = temp_dir();
  std::string pt = write_archive(d + "/deep.pt", read_file(kFuzzDir + "/torch_pickle/regress-deep.pkl"));
  expect_error([&] { torch_pickle_load(pt); }, {"deep.pt", "nesting deeper than 64"});
  expect_error([&] { torch_pickle_load_state_dict(pt); }, {"deep.pt", "holds a list, not a state_dict"});
}

TEST(ParserBounds, SelfContainingListIsAnError) {
  std::string d = temp_dir();
  std::string pt = write_archive(d + "/cycle.pt", read_file(kFuzzDir + "/torch_pickle/regress-cycle.pkl"));
  expect_error([&] { torch_pickle_load(pt); }, {"cycle.pt", "nesting deeper than 64", "(a cycle?)"});
}

TEST(ParserBounds, SharedReferencesCannotExpandExponentially) {
  // 60 lists, each holding the one before twice: a 486-byte pickle, 2^60 values as a tree
  std::string d = temp_dir();
  std::string pt = write_archive(d + "/laughs.pt", read_file(kFuzzDir + "/torch_pickle/regress-shared-2-60.pkl"));
  expect_error([&] { torch_pickle_load(pt); }, {"laughs.pt", "expands to more than 16x its size"});
}

TEST(ParserBounds, StorageSizeThatWrapsIsAnError) {
  // numel 2^62 + 2 floats: times 4 bytes it wraps to data/0's 8 bytes
  std::string d = temp_dir();
  std::string pt = write_archive(d + "/wrap.pt", read_file(kFuzzDir + "/torch_pickle/regress-numel-wraps.pkl"));
  expect_error([&] { torch_pickle_load_state_dict(pt); },
               {"wrap.pt", "data/0 holds 8 bytes, not 4611686018427387906 elements"});
}

TEST(ParserBounds, DeeplyNestedSafetensorsHeaderIsAnError) {
  // a shape nested 20000 deep; its error message's dump and a JSON copy used to recurse per level
  std::string path = kFuzzDir + "/safetensors/regress-deep-header.safetensors";
  expect_error([&] { safetensors_load(path); }, {path, "nests JSON deeper than 8 levels"});
  std::string d = temp_dir(),
              header = "{\"__metadata__\":{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}}";
  uint64_t n = header.size();
  std::ofstream(d + "/meta.safetensors", std::ios::binary) << std::string((const char*)&n, 8) << header;
  expect_error([&] { safetensors_load(d + "/meta.safetensors"); }, {"meta.safetensors", "deeper than 8"});
}

// A model tag is one folder under its source's: "../../x" would write outside the base dir.
TEST(Checkpoint, ModelTagIsOneFolderName) {
  BaseDir base;
  for (const char* tag : {"../../x", "..", ".", "a/b", "/abs", ""})
    expect_error([&] { checkpoint_dir("base", tag); }, {"--model-tag", "one path component"});
  expect_error([&] { checkpoint_locate("sft", "../x"); }, {"--model-tag '../x'", "one path component"});
  EXPECT_EQ(checkpoint_dir("base", "d4..x"), base.dir + "/base_checkpoints/d4..x");  // dots inside a name are a name
}

// 100,000 keys in one object. An insert that searches the keys already there costs about
// n^2/2 = 5e9 string compares (15-17 s measured on ordered_json); a hashed or tree lookup
// costs n log2 n = 1.7e6, tens of milliseconds. A second is 20x that on a loaded 2-core machine
// and still 15x under the quadratic time.
TEST(ParserBounds, HundredThousandKeysParseInUnderASecond) {
  constexpr int kKeys = 100000;
  std::string config = "{";
  for (int i = 0; i < kKeys; i++) config += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  config += ",\"k5\":-1,\"inf\":Infinity}";  // a repeated key (the last value wins, as in Python)
  auto t0 = std::chrono::steady_clock::now();
  nlohmann::ordered_json j = checkpoint_parse_json(config, "config.json");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0) << "100k-key config took " << secs << " s";
  ASSERT_EQ(j.size(), (size_t)kKeys + 1);
  EXPECT_EQ(j.begin().key(), "k0");  // the file's order kept
  EXPECT_EQ(std::prev(j.end()).key(), "inf");
  EXPECT_EQ(std::prev(j.end(), 2).key(), "k99999");
  EXPECT_EQ(j["k5"], -1);
  EXPECT_EQ(j["k77777"], 77777);
  EXPECT_EQ(j["inf"].get<double>(), INFINITY);

  // a safetensors header of 100,000 names: its metadata (a header's own object, whose keys went
  // through the same insert), beside one tensor, so the time is the header's and not 100,000
  // tensors' allocations and reads
  std::string header = "{\"__metadata__\":{";
  for (int i = 0; i < kKeys; i++)
    header += (i ? ",\"m" : "\"m") + std::to_string(i) + "\":\"" + std::to_string(i) + "\"";
  header += "},\"w\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}";
  uint64_t n = header.size();
  std::string path = temp_dir() + "/many.safetensors";
  std::ofstream(path, std::ios::binary) << std::string((const char*)&n, 8) << header << "abc";
  t0 = std::chrono::steady_clock::now();
  SafetensorsFile f = safetensors_load(path);
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 1.0) << "a 100k-key safetensors header took " << secs << " s";
  ASSERT_EQ(f.metadata.size(), (size_t)kKeys);
  EXPECT_EQ(f.metadata["m77777"], "77777");
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].second[2].item<uint8_t>(), 'c');
}
