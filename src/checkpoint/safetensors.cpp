// safetensors reader and writer (format in include/nanochat/checkpoint/safetensors.h). The rules the
// reader enforces are those of the Rust reference (safetensors/src/tensor.rs): header of at
// most 100 MB inside the file, a JSON object, known dtypes, shape x itemsize == byte span,
// spans contiguous from 0 to the end of the file with no gap or overlap, no duplicate names.

#include "nanochat/checkpoint/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <unordered_set>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <ATen/ops/empty.h>

#include "nanochat/common/atomic_file.h"
#include "nanochat/common/regular_file.h"
#include "nanochat/common/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace nanochat {

namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the Rust reference's limit
// a header is {name: {"dtype", "shape": [...], "data_offsets": [...]}}: 3 levels; deeper JSON is
// refused while parsing, before nlohmann's recursive copy, dump or destructor could meet it
constexpr int kMaxHeaderDepth = 8;

// a header's nesting and top-level names as the parser meets them; builds nothing
class HeaderScan final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool too_deep = false;
  std::string duplicate, error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool key(string_t& k) override {
    if (open_ == 1 && !names_.insert(k).second && duplicate.empty()) duplicate = k;
    return true;
  }
  bool end_object() override { return --open_, true; }
  bool start_array(std::size_t) override { return enter(); }
  bool end_array() override { return --open_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  // containers open, the header object the first (a tensor's shape is the third)
  bool enter() { return !(too_deep = ++open_ > kMaxHeaderDepth); }
  int open_ = 0;
  std::unordered_set<std::string> names_;
};

// a JSON value for an error message, cut short
std::string short_dump(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

struct DtypeName {
  at::ScalarType dtype;
  const char* name;
};
const DtypeName kDtypes[] = {
    {at::kDouble, "F64"},
    {at::kFloat, "F32"},
    {at::kHalf, "F16"},
    {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},
    {at::kInt, "I32"},
    {at::kShort, "I16"},
    {at::kChar, "I8"},
    {at::kByte, "U8"},
    {torch::kBool, "BOOL"},
    {torch::kFloat8_e4m3fn, "F8_E4M3"},
    {torch::kFloat8_e5m2, "F8_E5M2"},
};

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// reads exactly n bytes at offset (pread may return less, e.g. above 2 GB per call)
bool pread_all(int fd, void* dst, uint64_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = pread(fd, p, n, (off_t)offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= (uint64_t)got;
    offset += (uint64_t)got;
  }
  return true;
}

struct Entry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
  size_t header_index;
};

uint64_t json_u64(const std::string& path, const std::string& key, const nlohmann::json& v, const char* what) {
  if (!v.is_number_unsigned())
    fail("%s: tensor '%s': %s must be non-negative integers, got %s", path.c_str(), key.c_str(), what,
         short_dump(v).c_str());
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& path, const std::string& key, const nlohmann::json& v, size_t index) {
  if (!v.is_object()) fail("%s: tensor '%s': header entry is not an object", path.c_str(), key.c_str());
  Entry e{key, at::kFloat, {}, 0, 0, index};
  auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
  if (dt == v.end() || sh == v.end() || off == v.end())
    fail("%s: tensor '%s': header entry needs dtype, shape and data_offsets", path.c_str(), key.c_str());
  if (!dt->is_string() || !safetensors_dtype_from_name(dt->get<std::string>(), e.dtype))
    fail("%s: tensor '%s': unknown dtype %s (known: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2)",
         path.c_str(), key.c_str(), short_dump(*dt).c_str());
  if (!sh->is_array()) fail("%s: tensor '%s': shape is not an array", path.c_str(), key.c_str());
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t n = json_u64(path, key, d, "shape");
    if (n > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, n, &numel))
      fail("%s: tensor '%s': shape %s is too large", path.c_str(), key.c_str(), short_dump(*sh).c_str());
    e.shape.push_back((int64_t)n);
  }
  if (!off->is_array() || off->size() != 2)
    fail("%s: tensor '%s': data_offsets must be [begin, end]", path.c_str(), key.c_str());
  e.begin = json_u64(path, key, (*off)[0], "data_offsets");
  e.end = json_u64(path, key, (*off)[1], "data_offsets");
  if (e.end < e.begin)
    fail("%s: tensor '%s': data_offsets [%llu, %llu) end before they begin", path.c_str(), key.c_str(),
         (unsigned long long)e.begin, (unsigned long long)e.end);
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, (uint64_t)c10::elementSize(e.dtype), &nbytes) || nbytes != e.end - e.begin)
    fail("%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets span %llu", path.c_str(), key.c_str(),
         short_dump(*sh).c_str(), dt->get<std::string>().c_str(),
         (unsigned long long)(numel * c10::elementSize(e.dtype)), (unsigned long long)(e.end - e.begin));
  return e;
}

}  // namespace

static std::string safetensors_dtype_name_or_empty(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (d.dtype == dtype) return d.name;
  return "";
}

std::string safetensors_dtype_name(at::ScalarType dtype) {
  std::string name = safetensors_dtype_name_or_empty(dtype);
  if (!name.empty()) return name;
  fail("safetensors cannot store dtype %s", c10::toString(dtype));
}

bool safetensors_dtype_from_name(const std::string& name, at::ScalarType& dtype) {
  for (const auto& d : kDtypes)
    if (name == d.name) {
      dtype = d.dtype;
      return true;
    }
  return false;
}

void safetensors_check_savable(const std::string& path, const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      fail("cannot save %s: tensor name '%s' is reserved", path.c_str(), name.c_str());
    if (!seen.insert(name).second) fail("cannot save %s: tensor '%s' appears twice", path.c_str(), name.c_str());
    if (!t.defined()) fail("cannot save %s: tensor '%s' is undefined", path.c_str(), name.c_str());
    if (safetensors_dtype_name_or_empty(t.scalar_type()).empty())
      fail("cannot save %s: tensor '%s' has dtype %s, which safetensors cannot store", path.c_str(), name.c_str(),
           c10::toString(t.scalar_type()));
  }
}

void safetensors_save(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  safetensors_check_savable(path, tensors);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> cpu;
  cpu.reserve(tensors.size());
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    cpu.push_back(t.detach().to(torch::kCPU).contiguous());
    uint64_t nbytes = cpu.back().nbytes();
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint64_t n = h.size();
  AtomicFile f(path);
  f.write(&n, 8);
  f.write(h);
  for (const auto& t : cpu) f.write(t.data_ptr(), t.nbytes());
  f.commit();
}

SafetensorsFile safetensors_load(const std::string& path) {
  Fd fd{open_regular_file(path, -1)};  // no FIFO, device or directory
  struct stat st;
  if (fstat(fd.fd, &st) != 0) fail("cannot stat %s: %s", path.c_str(), std::strerror(errno));
  uint64_t file_size = (uint64_t)st.st_size;
  uint64_t n = 0;
  if (file_size < 8 || !pread_all(fd.fd, &n, 8, 0))
    fail("%s: truncated: %llu bytes, but a safetensors file starts with an 8-byte header length", path.c_str(),
         (unsigned long long)file_size);
  if (n > kMaxHeaderBytes || n > file_size - 8)
    fail("%s: header length %llu does not fit the file (%llu bytes; at most %llu): truncated or not safetensors",
         path.c_str(), (unsigned long long)n, (unsigned long long)file_size, (unsigned long long)kMaxHeaderBytes);
  std::string text(n, '\0');
  if (!pread_all(fd.fd, text.data(), n, 8)) fail("%s: cannot read the header: %s", path.c_str(), std::strerror(errno));

  // nesting and duplicate names (nlohmann keeps one of two silently) checked by a SAX pass
  // that builds nothing, then the header parsed into a tree-keyed object (a key inserted in log
  // time). ordered_json inserts each key with a linear search, and nlohmann's callback parser
  // looks through an object's members at the end of each member object: both took seconds
  // for a header of 100,000 names. The entries are put in data order below.
  HeaderScan scan;
  nlohmann::json::sax_parse(text, &scan);
  if (scan.too_deep)
    fail("%s: the header nests JSON deeper than %d levels: not safetensors", path.c_str(), kMaxHeaderDepth);
  if (!scan.error.empty()) fail("%s: the header is not valid JSON (%s)", path.c_str(), scan.error.c_str());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("%s: the header is not valid JSON (%s)", path.c_str(), e.what());
  }
  if (!header.is_object()) fail("%s: the header is not a JSON object", path.c_str());
  if (!scan.duplicate.empty())
    fail("%s: tensor '%s' appears twice in the header", path.c_str(), scan.duplicate.c_str());

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail("%s: __metadata__ is not an object", path.c_str());
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail("%s: __metadata__ '%s' is not a string", path.c_str(), mk.c_str());
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, v, entries.size()));
  }

  // data order, then the spans must tile [0, data_size) exactly
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.header_index) < std::tie(b.begin, b.end, b.header_index);
  });
  uint64_t data_size = file_size - 8 - n, pos = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.end > data_size)
      fail("%s: tensor '%s': data_offsets [%llu, %llu) run past the end of the data (%llu bytes): truncated file?",
           path.c_str(), e.name.c_str(), (unsigned long long)e.begin, (unsigned long long)e.end,
           (unsigned long long)data_size);
    if (e.begin < pos)
      fail("%s: tensor '%s': data_offsets [%llu, %llu) overlap tensor '%s' [%llu, %llu)", path.c_str(), e.name.c_str(),
           (unsigned long long)e.begin, (unsigned long long)e.end, prev->name.c_str(), (unsigned long long)prev->begin,
           (unsigned long long)prev->end);
    if (e.begin > pos)
      fail("%s: tensor '%s': data_offsets [%llu, %llu) leave a gap after byte %llu", path.c_str(), e.name.c_str(),
           (unsigned long long)e.begin, (unsigned long long)e.end, (unsigned long long)pos);
    pos = e.end;
    prev = &e;
  }
  if (pos != data_size)
    fail("%s: %llu bytes after the last tensor's data (the header accounts for %llu of %llu)", path.c_str(),
         (unsigned long long)(data_size - pos), (unsigned long long)pos, (unsigned long long)data_size);

  // everything checked: read each tensor straight into its own memory
  for (const Entry& e : entries) {
    torch::Tensor t = at::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    if (!pread_all(fd.fd, t.data_ptr(), e.end - e.begin, 8 + n + e.begin))
      fail("%s: tensor '%s': cannot read %llu bytes: %s", path.c_str(), e.name.c_str(),
           (unsigned long long)(e.end - e.begin), errno ? std::strerror(errno) : "file shrank while reading");
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace nanochat
