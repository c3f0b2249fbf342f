// A restricted unpickler for torch.save's zip files (API in include/nanochat/checkpoint/torch_pickle.h).
//
// Pickle is a stack machine: opcodes push values, build containers from what is above the
// last MARK, and call "globals" (Python functions) with REDUCE. Arbitrary code can only run
// through a global, so this machine knows a closed list of them and refuses every other one
// when it is named, before any REDUCE. Storages are "persistent ids": a tuple
// ('storage', torch.FloatStorage, key, location, numel) whose bytes are the zip record
// data/<key>; tensors are rebuilt as strided views of them, bounds-checked first.
//
// A hostile pickle can nest containers a million deep, make a list contain itself, or
// reference one big subtree from many places (each BINGET is 2 bytes). So every object
// lives in one arena (freed flat, no recursion, cycles included), the tree is walked at most
// 64 deep, and the walk stops once it has produced more than a multiple of the pickle's size.

#include "nanochat/checkpoint/torch_pickle.h"

#include <ATen/ops/empty.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>

#include "nanochat/common/regular_file.h"
#include "nanochat/common/error.h"

namespace nanochat {

namespace {

struct Obj;
using ObjPtr = Obj*;  // owned by an Arena

struct Obj {
  enum Kind { None, Bool, Int, Float, Str, List, Tuple, Dict, Tensor, Storage, Global } kind;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                                // Str; Global: "module.name"
  std::vector<ObjPtr> items;                    // List, Tuple
  std::vector<std::pair<ObjPtr, ObjPtr>> dict;  // Dict, in insertion order
  torch::Tensor tensor;                         // Tensor; Storage: 1-D over the whole record
  explicit Obj(Kind k) : kind(k) {}
};

// every object of one load; the deque never moves them, and frees them one by one
using Arena = std::deque<Obj>;

const char* kind_name(Obj::Kind k) {
  static const char* names[] = {"None",  "bool", "int",    "float",   "str",   "list",
                                "tuple", "dict", "tensor", "storage", "global"};
  return names[k];
}

// storage classes that may appear in persistent ids, and the dtype of their elements
bool storage_dtype(const std::string& global, at::ScalarType& dtype) {
  static const std::pair<const char*, at::ScalarType> kStorages[] = {
      {"torch.DoubleStorage", at::kDouble},     {"torch.FloatStorage", at::kFloat}, {"torch.HalfStorage", at::kHalf},
      {"torch.BFloat16Storage", at::kBFloat16}, {"torch.LongStorage", at::kLong},   {"torch.IntStorage", at::kInt},
      {"torch.ShortStorage", at::kShort},       {"torch.CharStorage", at::kChar},   {"torch.ByteStorage", at::kByte},
      {"torch.BoolStorage", torch::kBool},
  };
  for (const auto& [name, dt] : kStorages)
    if (global == name) {
      dtype = dt;
      return true;
    }
  return false;
}

bool global_allowed(const std::string& g) {
  at::ScalarType unused;
  return g == "collections.OrderedDict" || g == "torch._utils._rebuild_tensor_v2" ||
         g == "torch._utils._rebuild_parameter" || g == "torch._utils._rebuild_parameter_with_state" ||
         storage_dtype(g, unused);
}

class Unpickler {
 public:
  Unpickler(const std::string& path, caffe2::serialize::PyTorchStreamReader& zip, uint64_t file_size, Arena& arena,
            const char* data, size_t size)
      : path_(path), zip_(zip), file_size_(file_size), arena_(arena), p_(data), end_(data + size) {}

  ObjPtr run() {
    while (true) {
      uint8_t op = u8();
      switch (op) {
        case 0x80:
          if (u8() > 5) bad("unsupported pickle protocol");
          break;                    // PROTO
        case 0x95: take(8); break;  // FRAME (protocol 4)
        case '.': {                 // STOP
          if (stack_.size() != 1 || !marks_.empty()) bad("STOP with a stack of %zu values", stack_.size());
          return stack_.back();
        }
        case 'c': {  // GLOBAL "module\nname\n"
          std::string module = line(), name = line();
          push(global(module + "." + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          ObjPtr name = pop(), module = pop();
          if (name->kind != Obj::Str || module->kind != Obj::Str) bad("STACK_GLOBAL needs two strings");
          push(global(module->s + "." + name->s));
          break;
        }
        case '}': push(make(Obj::Dict)); break;
        case ']': push(make(Obj::List)); break;
        case ')': push(make(Obj::Tuple)); break;
        case '(': marks_.push_back(stack_.size()); break;
        case 't':
        case 'l': {  // TUPLE, LIST from the values above the mark
          ObjPtr o = make(op == 't' ? Obj::Tuple : Obj::List);
          o->items = pop_to_mark();
          push(o);
          break;
        }
        case 'd': {  // DICT
          ObjPtr o = make(Obj::Dict);
          set_items(o, pop_to_mark());
          push(o);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          ObjPtr o = make(Obj::Tuple);
          o->items.resize(op - 0x84);
          for (size_t k = o->items.size(); k-- > 0;) o->items[k] = pop();
          push(o);
          break;
        }
        case 'q': memo_[u8()] = top(); break;                            // BINPUT
        case 'r': memo_[u32()] = top(); break;                           // LONG_BINPUT
        case 0x94: memo_[(uint32_t)memo_.size()] = top(); break;         // MEMOIZE
        case 'p': memo_[(uint32_t)std::stoul(digits())] = top(); break;  // PUT
        case 'h': push(memo(u8())); break;                               // BINGET
        case 'j': push(memo(u32())); break;                              // LONG_BINGET
        case 'g': push(memo((uint32_t)std::stoul(digits()))); break;     // GET
        case 'J': push(integer((int32_t)u32())); break;                  // BININT
        case 'K': push(integer(u8())); break;                            // BININT1
        case 'M': {                                                      // BININT2
          uint8_t lo = u8();
          push(integer(lo | (u8() << 8)));
          break;
        }
        case 0x8a: {  // LONG1: little-endian two's complement
          uint8_t n = u8();
          if (n > 8) bad("integer of %u bytes does not fit int64", n);
          const uint8_t* b = take(n);
          uint64_t v = 0;
          for (int k = 0; k < n; k++) v |= (uint64_t)b[k] << (8 * k);
          if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
          push(integer((int64_t)v));
          break;
        }
        case 'G': {  // BINFLOAT: big-endian double
          const uint8_t* b = take(8);
          uint64_t bits = 0;
          for (int k = 0; k < 8; k++) bits = bits << 8 | b[k];
          ObjPtr o = make(Obj::Float);
          std::memcpy(&o->f, &bits, 8);
          push(o);
          break;
        }
        case 'X': push(str(u32())); break;   // BINUNICODE
        case 0x8c: push(str(u8())); break;   // SHORT_BINUNICODE
        case 0x8d: push(str(u64())); break;  // BINUNICODE8
        case 'T': push(str(u32())); break;   // BINSTRING (protocol 1 str)
        case 'U': push(str(u8())); break;    // SHORT_BINSTRING
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          ObjPtr o = make(Obj::Bool);
          o->b = op == 0x88;
          push(o);
          break;
        }
        case 'N': push(make(Obj::None)); break;
        case 's': {  // SETITEM
          ObjPtr v = pop(), k = pop();
          set_items(top(), {k, v});
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<ObjPtr> kv = pop_to_mark();
          set_items(top(), kv);
          break;
        }
        case 'a': {  // APPEND
          ObjPtr v = pop();
          list_of(top())->items.push_back(v);
          break;
        }
        case 'e': {  // APPENDS
          std::vector<ObjPtr> vs = pop_to_mark();
          auto& items = list_of(top())->items;
          items.insert(items.end(), vs.begin(), vs.end());
          break;
        }
        case 'R': {  // REDUCE: call a global with a tuple of arguments
          ObjPtr args = pop(), fn = pop();
          if (fn->kind != Obj::Global || args->kind != Obj::Tuple) bad("REDUCE needs a global and a tuple");
          push(call(fn->s, args->items));
          break;
        }
        case 'b': {  // BUILD: OrderedDict's state is its __dict__ (state_dict's _metadata): not needed
          pop();     // the state
          if (top()->kind != Obj::Dict) bad("BUILD on a %s", kind_name(top()->kind));
          break;
        }
        case 'Q': push(persistent(pop())); break;  // BINPERSID
        case '0': pop(); break;                    // POP
        case '1': pop_to_mark(); break;            // POP_MARK
        case '2': push(top()); break;              // DUP
        default: bad("opcode 0x%02x ('%c') is not allowed in a checkpoint", op, op >= 32 && op < 127 ? op : '?');
      }
    }
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(const char* fmt, Args... args) {
    std::string what = strprintf(fmt, args...);
    fail("%s: data.pkl byte %zu: %s; only tensors, dicts, lists, tuples, numbers and strings are loaded", path_.c_str(),
         pos_ - 1, what.c_str());
  }
  [[noreturn]] void bad(const char* msg) { bad("%s", msg); }

  const uint8_t* take(uint64_t n) {
    if (n > (uint64_t)(end_ - p_))
      fail("%s: data.pkl is truncated (wanted %llu more bytes)", path_.c_str(), (unsigned long long)n);
    const uint8_t* b = reinterpret_cast<const uint8_t*>(p_);
    p_ += n;
    pos_ += n;
    return b;
  }
  uint8_t u8() { return *take(1); }
  uint32_t u32() {
    uint32_t v;
    std::memcpy(&v, take(4), 4);
    return v;
  }
  uint64_t u64() {
    uint64_t v;
    std::memcpy(&v, take(8), 8);
    return v;
  }
  std::string line() {
    const char* nl = static_cast<const char*>(std::memchr(p_, '\n', end_ - p_));
    if (!nl) bad("unterminated text line");
    std::string s(p_, nl);
    take(nl - p_ + 1);
    return s;
  }
  std::string digits() {
    std::string s = line();
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) bad("bad memo index");
    return s;
  }
  ObjPtr str(uint64_t n) {
    const uint8_t* b = take(n);
    ObjPtr o = make(Obj::Str);
    o->s.assign(reinterpret_cast<const char*>(b), n);
    return o;
  }
  ObjPtr integer(int64_t v) {
    ObjPtr o = make(Obj::Int);
    o->i = v;
    return o;
  }

  ObjPtr make(Obj::Kind k) { return &arena_.emplace_back(k); }
  void push(ObjPtr o) { stack_.push_back(o); }
  ObjPtr top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad("stack underflow");
    return stack_.back();
  }
  ObjPtr pop() {
    ObjPtr o = top();
    stack_.pop_back();
    return o;
  }
  std::vector<ObjPtr> pop_to_mark() {
    if (marks_.empty()) bad("no MARK");
    std::vector<ObjPtr> out(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  ObjPtr memo(uint32_t k) {
    auto it = memo_.find(k);
    if (it == memo_.end()) bad("memo entry %u was never stored", k);
    return it->second;
  }
  ObjPtr list_of(const ObjPtr& o) {
    if (o->kind != Obj::List) bad("APPEND to a %s", kind_name(o->kind));
    return o;
  }
  void set_items(const ObjPtr& d, const std::vector<ObjPtr>& kv) {
    if (d->kind != Obj::Dict) bad("SETITEM on a %s", kind_name(d->kind));
    if (kv.size() % 2) bad("odd number of dict items");
    for (size_t k = 0; k < kv.size(); k += 2) d->dict.emplace_back(kv[k], kv[k + 1]);
  }

  ObjPtr global(const std::string& name) {
    if (!global_allowed(name))
      fail(
          "%s: refusing to load: the pickle calls %.200s, which is not a tensor or container type (a checkpoint never "
          "needs it; the file may be malicious)",
          path_.c_str(), name.c_str());
    ObjPtr o = make(Obj::Global);
    o->s = name;
    return o;
  }

  int64_t int_arg(const ObjPtr& o, const char* what) {
    if (o->kind != Obj::Int) bad("%s must be an int, not %s", what, kind_name(o->kind));
    return o->i;
  }
  std::vector<int64_t> ints_arg(const ObjPtr& o, const char* what) {
    if (o->kind != Obj::Tuple && o->kind != Obj::List) bad("%s must be a tuple", what);
    std::vector<int64_t> v;
    for (const auto& x : o->items) v.push_back(int_arg(x, what));
    return v;
  }

  ObjPtr call(const std::string& fn, const std::vector<ObjPtr>& args) {
    if (fn == "collections.OrderedDict") {
      if (!args.empty()) bad("OrderedDict(...) with arguments");
      return make(Obj::Dict);
    }
    if (fn == "torch._utils._rebuild_tensor_v2") {  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
      if (args.size() < 4 || args[0]->kind != Obj::Storage) bad("_rebuild_tensor_v2 without a storage");
      return tensor_view(args[0], int_arg(args[1], "storage offset"), ints_arg(args[2], "size"),
                         ints_arg(args[3], "stride"));
    }
    // _rebuild_parameter(data, requires_grad, hooks[, state]): the tensor itself
    if (args.empty() || args[0]->kind != Obj::Tensor) bad("%s without a tensor", fn.c_str());
    return args[0];
  }

  // a strided view of a storage, checked to stay inside it (as_strided does not check)
  ObjPtr tensor_view(const ObjPtr& storage, int64_t offset, const std::vector<int64_t>& size,
                     const std::vector<int64_t>& stride) {
    int64_t numel = storage->tensor.numel();
    if (size.size() != stride.size()) bad("size and stride of different lengths");
    if (offset < 0 || offset > numel)
      bad("storage offset %lld outside a storage of %lld elements", (long long)offset, (long long)numel);
    bool empty = false;
    for (int64_t s : size) empty |= s == 0;
    int64_t last = offset;  // index of the last element the view touches
    for (size_t d = 0; d < size.size(); d++) {
      if (size[d] < 0 || stride[d] < 0) bad("negative size or stride");
      int64_t step;
      if (!empty &&
          (__builtin_mul_overflow(size[d] - 1, stride[d], &step) || __builtin_add_overflow(last, step, &last)))
        bad("tensor extent overflows");
    }
    if (!empty && last >= numel)
      bad("tensor reaches element %lld of a storage of %lld elements", (long long)last, (long long)numel);
    ObjPtr o = make(Obj::Tensor);
    o->tensor = storage->tensor.as_strided(size, stride, offset);
    return o;
  }

  ObjPtr persistent(const ObjPtr& pid) {
    const auto& a = pid->items;
    if (pid->kind != Obj::Tuple || a.size() != 5 || a[0]->kind != Obj::Str || a[0]->s != "storage" ||
        a[1]->kind != Obj::Global || a[2]->kind != Obj::Str || a[4]->kind != Obj::Int)
      bad("persistent id is not ('storage', type, key, location, numel)");
    auto cached = storages_.find(a[2]->s);
    if (cached != storages_.end()) return cached->second;  // shared storage: one tensor, many views
    at::ScalarType dtype;
    if (!storage_dtype(a[1]->s, dtype)) bad("%s is not a storage type", a[1]->s.c_str());
    int64_t numel = a[4]->i;
    std::string record = "data/" + a[2]->s;
    if (numel < 0 || !zip_.hasRecord(record)) bad("storage record %s is missing", record.c_str());
    size_t nbytes = zip_.getRecordSize(record);
    // torch.save stores records uncompressed: none can be larger than the file
    if (nbytes > file_size_)
      bad("storage record %s claims %zu bytes in a file of %llu", record.c_str(), nbytes,
          (unsigned long long)file_size_);
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)c10::elementSize(dtype), &want) || want != nbytes)
      bad("storage %s holds %zu bytes, not %lld elements of %s", record.c_str(), nbytes, (long long)numel,
          c10::toString(dtype));
    ObjPtr o = make(Obj::Storage);
    o->tensor = at::empty({numel}, torch::TensorOptions().dtype(dtype));
    if (nbytes) zip_.getRecord(record, o->tensor.data_ptr(), nbytes);
    storages_[a[2]->s] = o;
    return o;
  }

  std::string path_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  uint64_t file_size_;
  Arena& arena_;
  const char* p_;
  const char* end_;
  size_t pos_ = 0;
  std::vector<ObjPtr> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, ObjPtr> memo_;
  std::unordered_map<std::string, ObjPtr> storages_;
};

// first line of a c10::Error, without LibTorch's backtrace
std::string short_what(const c10::Error& e) {
  std::string s = e.what_without_backtrace();
  return s.substr(0, s.find('\n'));
}

// torch.save stores every record uncompressed, so none can claim more bytes than the file has;
// checked before PyTorchStreamReader allocates the record
void check_record_size(const std::string& path, caffe2::serialize::PyTorchStreamReader& zip, const std::string& name,
                       uint64_t file_size) {
  size_t n = zip.getRecordSize(name);
  if (n > file_size)
    fail("%s: the archive's %s claims %zu bytes in a file of %llu: corrupt", path.c_str(), name.c_str(), n,
         (unsigned long long)file_size);
}

// the unpickled root; its objects live in `arena`
ObjPtr load_root(const std::string& path, Arena& arena, uint64_t* pickle_bytes) {
  ::close(open_regular_file(path, -1));  // no FIFO, device or directory
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open %s: %s", path.c_str(), std::strerror(errno));
  unsigned char magic[4] = {0, 0, 0, 0};
  size_t got = std::fread(magic, 1, 4, f);
  long file_size = std::fseek(f, 0, SEEK_END) == 0 ? std::ftell(f) : -1;
  std::fclose(f);
  if (got < 4 || std::memcmp(magic, "PK\x03\x04", 4) != 0)
    fail("%s: not a torch.save zip archive%s", path.c_str(),
         got >= 1 && magic[0] == 0x80 ? " (the legacy format of PyTorch < 1.6: re-save it with a current torch)" : "");
  if (file_size < 0) fail("cannot read %s: %s", path.c_str(), std::strerror(errno));
  try {
    caffe2::serialize::PyTorchStreamReader zip(path);
    if (zip.hasRecord("byteorder")) {
      check_record_size(path, zip, "byteorder", (uint64_t)file_size);
      auto [bo, n] = zip.getRecord("byteorder");
      if (std::string(static_cast<const char*>(bo.get()), n) != "little")
        fail("%s: written on a big-endian machine; not supported", path.c_str());
    }
    if (!zip.hasRecord("data.pkl")) fail("%s: the archive has no data.pkl", path.c_str());
    check_record_size(path, zip, "data.pkl", (uint64_t)file_size);
    auto [pkl, size] = zip.getRecord("data.pkl");
    *pickle_bytes = size;
    Unpickler u(path, zip, (uint64_t)file_size, arena, static_cast<const char*>(pkl.get()), size);
    return u.run();
  } catch (const c10::Error& e) {
    fail("%s: cannot read the torch.save archive: %s", path.c_str(), short_what(e).c_str());
  }
}

std::string key_string(const std::string& path, const ObjPtr& k) {
  if (k->kind == Obj::Str) return k->s;
  if (k->kind == Obj::Int) return std::to_string(k->i);
  fail("%s: a dict key is a %s; only str and int keys are supported", path.c_str(), kind_name(k->kind));
}

constexpr int kMaxDepth = 64;

// What a walk of the object graph may produce: values plus bytes of names and strings. Shared
// references (memo GETs) make a DAG whose tree can be exponentially larger than the pickle;
// a real checkpoint's tree is about as large as its pickle.
struct Expansion {
  const std::string& path;
  int64_t left;
  Expansion(const std::string& p, uint64_t pickle_bytes) : path(p), left(16 * (int64_t)pickle_bytes + (1 << 16)) {}
  void spend(size_t units) {
    left -= (int64_t)units + 1;
    if (left < 0)
      fail(
          "%s: the pickle expands to more than 16x its size (one object referenced from many places): corrupt or "
          "hostile file",
          path.c_str());
  }
};

void to_tree(Expansion& budget, const ObjPtr& o, const std::string& at, int depth, nlohmann::ordered_json& out,
             NamedTensors& tensors) {
  const std::string& path = budget.path;
  if (depth > kMaxDepth) fail("%s: nesting deeper than %d at '%.200s' (a cycle?)", path.c_str(), kMaxDepth, at.c_str());
  budget.spend(at.size() + o->s.size());
  auto join = [&](const std::string& k) { return at.empty() ? k : at + "." + k; };
  switch (o->kind) {
    case Obj::None: out = nullptr; break;
    case Obj::Bool: out = o->b; break;
    case Obj::Int: out = o->i; break;
    case Obj::Float: out = o->f; break;
    case Obj::Str: out = o->s; break;
    case Obj::List:
    case Obj::Tuple:
      out = nlohmann::ordered_json::array();
      for (size_t k = 0; k < o->items.size(); k++) {
        nlohmann::ordered_json v;
        to_tree(budget, o->items[k], join(std::to_string(k)), depth + 1, v, tensors);
        out.push_back(std::move(v));
      }
      break;
    case Obj::Dict:
      out = nlohmann::ordered_json::object();
      for (const auto& [k, v] : o->dict) {
        std::string ks = key_string(path, k);
        budget.spend(ks.size());
        to_tree(budget, v, join(ks), depth + 1, out[ks], tensors);
      }
      break;
    case Obj::Tensor:
      tensors.emplace_back(at, o->tensor);
      out = {{"tensor", at}};
      break;
    default: fail("%s: '%s' is a bare %s", path.c_str(), at.c_str(), kind_name(o->kind));
  }
}

}  // namespace

TorchPickle torch_pickle_load(const std::string& path) {
  Arena arena;
  uint64_t pickle_bytes = 0;
  ObjPtr root = load_root(path, arena, &pickle_bytes);
  Expansion budget(path, pickle_bytes);
  TorchPickle out;
  to_tree(budget, root, "", 0, out.tree, out.tensors);
  return out;
}

NamedTensors torch_pickle_load_state_dict(const std::string& path) {
  Arena arena;
  uint64_t pickle_bytes = 0;
  ObjPtr root = load_root(path, arena, &pickle_bytes);
  Expansion budget(path, pickle_bytes);
  if (root->kind != Obj::Dict)
    fail("%s: holds a %s, not a state_dict (a dict of name -> tensor)", path.c_str(), kind_name(root->kind));
  NamedTensors out;
  for (const auto& [k, v] : root->dict) {
    if (k->kind != Obj::Str) fail("%s: a state_dict key is a %s, not a str", path.c_str(), kind_name(k->kind));
    if (v->kind != Obj::Tensor)
      fail("%s: '%.200s' is a %s, not a tensor: not a model state_dict", path.c_str(), k->s.c_str(),
           kind_name(v->kind));
    budget.spend(k->s.size());
    out.emplace_back(k->s, v->tensor);
  }
  return out;
}

}  // namespace nanochat
