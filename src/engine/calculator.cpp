// A recursive-descent evaluator for the calculator tool (upstream engine.py's use_calculator) with Python's numeric
// semantics. Values are computed while parsing; any error (syntax, type, overflow, division
// by zero) unwinds as CalcError and becomes nullopt.
#include "engine/calculator.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <system_error>
#include <utility>

namespace nanochat {
namespace {

struct CalcError {};

struct Value {
  enum Kind { Int, Float, Tuple, Str, Bytes } kind = Int;
  int64_t i = 0;
  double f = 0;
  std::string s;  // Str and Bytes
};

Value make_int(int64_t v) {
  Value r;
  r.kind = Value::Int;
  r.i = v;
  return r;
}
Value make_float(double v) {
  Value r;
  r.kind = Value::Float;
  r.f = v;
  return r;
}
Value make_tuple() {
  Value r;
  r.kind = Value::Tuple;
  return r;
}
bool is_number(const Value& v) { return v.kind == Value::Int || v.kind == Value::Float; }
double as_double(const Value& v) { return v.kind == Value::Int ? (double)v.i : v.f; }  // round-half-even

// ---- Python's int and float arithmetic --------------------------------------------------
int bit_length(uint64_t x) { return x ? 64 - __builtin_clzll(x) : 0; }

// int / int correctly rounded (Python's long_true_divide): scale the numerator so the
// integer quotient has 63-64 bits, fold the remainder into a sticky low bit, and let the
// uint64 -> double conversion round to nearest even.
double int_true_divide(int64_t a, int64_t b) {
  if (b == 0) throw CalcError{};
  const bool neg = (a < 0) != (b < 0);
  const uint64_t ua = a < 0 ? 0 - (uint64_t)a : (uint64_t)a, ub = b < 0 ? 0 - (uint64_t)b : (uint64_t)b;
  if (ua == 0) return neg ? -0.0 : 0.0;
  const int shift = std::max(0, 63 + bit_length(ub) - bit_length(ua));
  const unsigned __int128 n = (unsigned __int128)ua << shift;
  uint64_t q = (uint64_t)(n / ub);
  if (n % ub != 0) q |= 1;  // sticky: the true value lies strictly above q
  const double r = std::ldexp((double)q, -shift);
  return neg ? -r : r;
}

int64_t int_floor_div(int64_t a, int64_t b) {
  if (b == 0) throw CalcError{};
  if (a == std::numeric_limits<int64_t>::min() && b == -1) throw CalcError{};  // 2^63: too big
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
  return q;
}

int64_t int_mod(int64_t a, int64_t b) {
  if (b == 0) throw CalcError{};
  if (b == -1) return 0;  // INT64_MIN % -1 is undefined in C++
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// CPython's float_divmod: (floordiv, mod)
std::pair<double, double> float_divmod(double vx, double wx) {
  if (wx == 0.0) throw CalcError{};
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

// CPython's float_rem (the % operator)
double float_mod(double vx, double wx) {
  if (wx == 0.0) throw CalcError{};
  double mod = std::fmod(vx, wx);
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) mod += wx;
  } else {
    mod = std::copysign(0.0, wx);
  }
  return mod;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (a.kind == Value::Tuple || b.kind == Value::Tuple) {
    // () + () is (); () * n and n * () are () for any int n; everything else a TypeError
    if (op == "+" && a.kind == Value::Tuple && b.kind == Value::Tuple) return make_tuple();
    if (op == "*" && (a.kind == Value::Int || b.kind == Value::Int)) return make_tuple();
    throw CalcError{};
  }
  if (!is_number(a) || !is_number(b)) throw CalcError{};  // str/bytes never meet operators here
  if (a.kind == Value::Int && b.kind == Value::Int) {
    int64_t r;
    if (op == "+") {
      if (__builtin_add_overflow(a.i, b.i, &r)) throw CalcError{};
      return make_int(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(a.i, b.i, &r)) throw CalcError{};
      return make_int(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(a.i, b.i, &r)) throw CalcError{};
      return make_int(r);
    }
    if (op == "/") return make_float(int_true_divide(a.i, b.i));
    if (op == "//") return make_int(int_floor_div(a.i, b.i));
    if (op == "%") return make_int(int_mod(a.i, b.i));
    throw CalcError{};
  }
  const double x = as_double(a), y = as_double(b);
  if (op == "+") return make_float(x + y);
  if (op == "-") return make_float(x - y);
  if (op == "*") return make_float(x * y);
  if (op == "/") {
    if (y == 0.0) throw CalcError{};
    return make_float(x / y);
  }
  if (op == "//") return make_float(float_divmod(x, y).first);
  if (op == "%") return make_float(float_mod(x, y));
  throw CalcError{};
}

// ---- lexer + parser -----------------------------------------------------------------------
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value parse_all() {
    Value v = expr();
    skip_space();
    if (pos_ != s_.size()) throw CalcError{};
    return v;
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;   // recursion through unary(): every '(' and every sign
  int parens_ = 0;  // open parentheses

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(depth) {
      if (++d > kCalculatorMaxDepth) throw CalcError{};
    }
    ~DepthGuard() { d--; }
  };

  void skip_space() {
    while (pos_ < s_.size() && s_[pos_] == ' ') pos_++;
  }
  char peek() {
    skip_space();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  bool accept(std::string_view tok) {
    skip_space();
    if (s_.substr(pos_, tok.size()) != tok) return false;
    pos_ += tok.size();
    return true;
  }
  void expect(char c) {
    if (!accept(std::string_view(&c, 1))) throw CalcError{};
  }

  // expr := term (('+'|'-') term)*
  Value expr() {
    Value v = term();
    for (;;) {
      char c = peek();
      if (c != '+' && c != '-') return v;
      pos_++;
      v = binary_op(std::string(1, c), v, term());
    }
  }

  // term := unary (('*'|'//'|'/'|'%') unary)*   ("**" never reaches here: rejected up front)
  Value term() {
    Value v = unary();
    for (;;) {
      std::string op;
      if (accept("//")) op = "//";
      else if (accept("*")) op = "*";
      else if (accept("/")) op = "/";
      else if (accept("%")) op = "%";
      else return v;
      v = binary_op(op, v, unary());
    }
  }

  Value unary() {
    DepthGuard g(depth_);
    char c = peek();
    if (c != '+' && c != '-') return postfix();
    pos_++;
    Value v = unary();
    if (v.kind == Value::Int) {
      if (c == '-') {
        if (v.i == std::numeric_limits<int64_t>::min()) throw CalcError{};
        v.i = -v.i;
      }
      return v;
    }
    if (v.kind == Value::Float) {
      if (c == '-') v.f = -v.f;
      return v;
    }
    throw CalcError{};  // unary +/- on a tuple or string
  }

  // postfix := atom ('.' NAME '(' [expr] ')')*
  Value postfix() {
    Value v = atom();
    while (peek() == '.') {
      pos_++;
      skip_space();
      const std::string name = read_name();
      expect('(');
      Value arg;
      bool has_arg = false;
      if (peek() != ')') {
        arg = expr();
        has_arg = true;
      }
      expect(')');
      v = call_method(v, name, has_arg ? &arg : nullptr);
    }
    return v;
  }

  static Value call_method(const Value& self, const std::string& name, const Value* arg) {
    if (self.kind == Value::Tuple && name == "count" && arg) return make_int(0);  // () holds nothing
    if (self.kind != Value::Str && self.kind != Value::Bytes) throw CalcError{};
    if (name == "count") {
      if (!arg || arg->kind != self.kind) throw CalcError{};
      const std::string& sub = arg->s;
      if (sub.empty()) return make_int((int64_t)self.s.size() + 1);
      int64_t n = 0;
      for (size_t p = self.s.find(sub); p != std::string::npos; p = self.s.find(sub, p + sub.size())) n++;
      return make_int(n);
    }
    if ((name == "lower" || name == "upper") && !arg) {
      Value r = self;
      for (char& c : r.s) {
        if (name == "lower" && c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (name == "upper" && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
      }
      return r;
    }
    throw CalcError{};
  }

  std::string read_name() {
    if (pos_ >= s_.size() || !is_name_start(s_[pos_])) throw CalcError{};
    size_t start = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) pos_++;
    return std::string(s_.substr(start, pos_ - start));
  }

  // atom := NUMBER | STRING+ | '(' [expr] ')'
  Value atom() {
    char c = peek();
    if (c == '(') {
      pos_++;
      if (++parens_ > kCalculatorMaxParens) throw CalcError{};  // Python: "too many nested parentheses"
      struct Close {
        int& n;
        ~Close() { n--; }
      } close{parens_};
      if (peek() == ')') {
        pos_++;
        return make_tuple();
      }
      Value v = expr();
      expect(')');
      return v;
    }
    if (is_digit(c) || (c == '.' && pos_ + 1 < s_.size() && is_digit(s_[pos_ + 1]))) return number();
    if (c == '\'' || c == '"' || is_name_start(c)) return strings();
    throw CalcError{};
  }

  // decimal int or float literal; letters or '_' right after it (hex, 1e5, 1_0, 1j) are not
  // supported and fail
  Value number() {
    const size_t start = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) pos_++;
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_float = true;
      pos_++;
      while (pos_ < s_.size() && is_digit(s_[pos_])) pos_++;
    }
    if (pos_ < s_.size() && is_name_char(s_[pos_])) throw CalcError{};
    std::string_view text = s_.substr(start, pos_ - start);
    if (is_float) {
      double d = 0;
      auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), d);
      // out of range: Python's float literal becomes inf (or 0.0), from_chars reports it
      // out of range: Python's literal becomes inf, a subnormal or 0.0; strtod (correctly
      // rounded in glibc) gives exactly that
      if (ec == std::errc::result_out_of_range) {
        d = std::strtod(std::string(text).c_str(), nullptr);
      } else if (ec != std::errc() || p != text.data() + text.size()) {
        throw CalcError{};
      }
      return make_float(d);
    }
    // Python forbids leading zeros in a nonzero decimal int ("01"), allows "00"
    if (text.size() > 1 && text[0] == '0' && text.find_first_not_of('0') != std::string_view::npos) throw CalcError{};
    int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size()) throw CalcError{};  // past int64
    return make_int(v);
  }

  // one or more adjacent string literals, concatenated (str and bytes cannot mix)
  Value strings() {
    Value v;
    bool first = true;
    while (true) {
      char c = peek();
      if (c != '\'' && c != '"' && !is_name_start(c)) break;
      bool bytes = false;
      if (is_name_start(c)) {  // a prefix must be followed directly by a quote
        size_t start = pos_;
        std::string prefix = read_name();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) {
          if (first) throw CalcError{};  // a bare name: NameError (no names are defined)
          pos_ = start;                  // "'a' x": a syntax error, found by the caller
          break;
        }
        for (char& ch : prefix) ch = (char)std::tolower((unsigned char)ch);
        if (prefix == "b" || prefix == "br" || prefix == "rb") bytes = true;
        else if (prefix != "r" && prefix != "u" && prefix != "f" && prefix != "fr" && prefix != "rf") throw CalcError{};
      }
      std::string text = read_quoted();
      const Value::Kind kind = bytes ? Value::Bytes : Value::Str;
      if (!first && kind != v.kind) throw CalcError{};
      v.kind = kind;
      v.s += text;
      first = false;
    }
    return v;
  }

  // '...' or "..." or a triple-quoted form; the allowed characters hold no backslash or
  // newline, so there are no escapes
  std::string read_quoted() {
    const char q = s_[pos_];
    const std::string triple(3, q);
    if (s_.substr(pos_, 3) == triple) {
      size_t end = s_.find(triple, pos_ + 3);
      if (end == std::string_view::npos) throw CalcError{};
      std::string text(s_.substr(pos_ + 3, end - pos_ - 3));
      pos_ = end + 3;
      return text;
    }
    size_t end = s_.find(q, pos_ + 1);
    if (end == std::string_view::npos) throw CalcError{};
    std::string text(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return text;
  }
};

std::string bytes_repr(const std::string& s) {
  // Python's bytes repr: double quotes only when the text has ' and no "
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  std::string r = dq ? "b\"" : "b'";
  for (char c : s) {
    if (!dq && c == '\'') r += '\\';
    r += c;
  }
  r += dq ? '"' : '\'';
  return r;
}

std::string value_str(const Value& v) {
  switch (v.kind) {
    case Value::Int: return std::to_string(v.i);
    case Value::Float: return calculator_float_repr(v.f);
    case Value::Tuple: return "()";
    case Value::Str: return v.s;
    case Value::Bytes: return bytes_repr(v.s);
  }
  return {};
}

bool all_in(std::string_view s, const char* allowed) {
  for (char c : s)
    if (c == '\0' || !std::strchr(allowed, c)) return false;
  return true;
}

bool contains_forbidden_word(std::string_view s) {
  static const char* const kWords[] = {"__",   "import",  "exec",      "eval",    "compile", "open",
                                       "file", "input",   "raw_input", "globals", "locals",  "vars",
                                       "dir",  "getattr", "setattr",   "delattr", "hasattr"};
  std::string lower(s);
  for (char& c : lower) c = (char)std::tolower((unsigned char)c);
  for (const char* w : kWords)
    if (lower.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

std::string calculator_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (x == 0.0) return std::signbit(x) ? "-0.0" : "0.0";
  // shortest round-trip digits (Ryu in libstdc++), read back as digits and exponent
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = 0; k < e; k++)
    if (sci[k] != '.') digits += sci[k];
  const int exp10 = std::atoi(sci.c_str() + e + 1);  // x = d.ddd * 10^exp10
  const int decpt = exp10 + 1;                       // x = 0.dddd * 10^decpt
  const int nd = (int)digits.size();
  std::string out = x < 0 ? "-" : "";
  if (decpt <= -4 || decpt > 16) {  // CPython's float_repr_style 'short', mode 'r'
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    return out + eb;
  }
  if (decpt <= 0) return out + "0." + std::string(-decpt, '0') + digits;
  if (decpt < nd) return out + digits.substr(0, decpt) + "." + digits.substr(decpt);
  return out + digits + std::string(decpt - nd, '0') + ".0";
}

std::optional<std::string> calculator_use(std::string_view expr_in) {
  std::string expr;
  for (char c : expr_in)
    if (c != ',') expr += c;
  if (expr.size() > kCalculatorMaxChars) return std::nullopt;
  if (all_in(expr, "0123456789*+-/.() ")) {
    if (expr.find("**") != std::string::npos) return std::nullopt;  // no power operator
  } else {
    if (!all_in(expr, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'\"()._ ")) return std::nullopt;
    if (contains_forbidden_word(expr)) return std::nullopt;
    if (expr.find(".count(") == std::string::npos) return std::nullopt;
  }
  try {
    return value_str(Parser(expr).parse_all());
  } catch (const CalcError&) {
    return std::nullopt;
  }
}

}  // namespace nanochat
