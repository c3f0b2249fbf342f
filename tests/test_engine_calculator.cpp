// Tests for the calculator tool (upstream engine.py's use_calculator): every expression is also evaluated by
// upstream's own use_calculator in Python (fixtures/calculator_reference.py), which is the
// reference; a seeded random sweep of arithmetic expressions and of float reprs; and each
// rejection of use_calculator by name.
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/calculator.h"
#include "test_util.h"

using namespace nanochat;
using nlohmann::json;

namespace {

// Python's answers for `items` (mode "calc": str(use_calculator(e)) or null; "repr": repr(float(s)))
std::vector<std::optional<std::string>> python_reference(const std::vector<std::string>& items,
                                                         const std::string& mode = "calc") {
  const std::string dir = make_temp_dir();
  { std::ofstream(dir + "/in.json") << json(items).dump(); }
  CommandResult r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_SOURCE_DIR +
                              "/tests/fixtures/calculator_reference.py " + dir + "/in.json " + mode);
  std::system(("rm -rf " + dir).c_str());
  EXPECT_EQ(r.rc, 0) << r.err;
  std::vector<std::optional<std::string>> out;
  if (r.rc != 0) return out;
  for (const json& j : json::parse(r.out))
    out.push_back(j.is_null() ? std::nullopt : std::optional(j.get<std::string>()));
  EXPECT_EQ(out.size(), items.size());
  return out;
}

std::string show(const std::optional<std::string>& s) { return s ? "'" + *s + "'" : "None"; }

// an int result string outside int64: Python has big ints, the calculator answers None
bool beyond_int64(const std::string& s) {
  if (s.empty() || s.find_first_not_of("-0123456789") != std::string::npos) return false;
  errno = 0;
  std::strtoll(s.c_str(), nullptr, 10);
  return errno == ERANGE;
}

void expect_matches_python(const std::vector<std::string>& exprs) {
  auto ref = python_reference(exprs);
  ASSERT_EQ(ref.size(), exprs.size());
  for (size_t i = 0; i < exprs.size(); i++) {
    std::optional<std::string> got = calculator_use(exprs[i]);
    if (ref[i] && beyond_int64(*ref[i])) {
      EXPECT_EQ(got, std::nullopt) << "expr " << exprs[i] << " overflows int64 (Python: " << *ref[i] << ")";
    } else {
      EXPECT_EQ(show(got), show(ref[i])) << "expr: " << exprs[i];
    }
  }
}

}  // namespace

TEST(Calculator, UpstreamExamples) {
  EXPECT_EQ(calculator_use("12/60"), "0.2");
  EXPECT_EQ(calculator_use("0.2*50"), "10.0");
  EXPECT_EQ(calculator_use("7//2"), "3");
  EXPECT_EQ(calculator_use("1,234 * 5"), "6170");
  EXPECT_EQ(calculator_use("'strawberry'.count('r')"), "3");
}

TEST(Calculator, TableAgainstPython) {
  const std::string big_float = "1" + std::string(400, '0') + ".0";
  std::vector<std::string> exprs = {
      // ints
      "1+2",
      "2*(3+4)",
      "10-3-2",
      "2*3+4*5",
      "(1+2)*3",
      "10%3*2",
      "100//7",
      "-7//2",
      "7//-2",
      "-7//-2",
      "7%-3",
      "-7%3",
      "-7%-3",
      "0%5",
      "5%5",
      "--1",
      "+-+1",
      "1--1",
      "1 - -1",
      "((((1))))",
      " 1+1",
      "1 +  2 ",
      "00",
      "0",
      "000+1",
      "9223372036854775807",
      "-9223372036854775807-1",
      "9223372036854775807+1",
      "12345678901234567890",
      "3037000500*3037000500",
      "-9223372036854775807//2",
      "4611686018427387904*2",
      // true division, correctly rounded
      "1/3",
      "2/3",
      "100/7",
      "0/5",
      "0/-5",
      "-0/5",
      "6/3",
      "-6/4",
      "123456789012345678/7",
      "9007199254740993/1",
      "9223372036854775807/1",
      "9223372036854775807/3",
      "1/9223372036854775807",
      "-9223372036854775807/-7",
      "18014398509481985/2",
      "9007199254740995/2",
      "1/1000",
      "1/10000",
      "1/100000",
      // floats
      "0.1+0.2",
      "1.5*2",
      "3.0",
      "3.",
      ".5",
      "0.50",
      "00.5",
      "01.5",
      "1.0/3",
      "2.5/0.5",
      "10.0/4",
      "1000000000000000.0*10",
      "999999999999999.9",
      "9999999999999998.0",
      "12345678901234567.0",
      "0.0001",
      "0.00001",
      "0.000123456",
      "-0.0",
      "0*-1.0",
      "-0.0+0.0",
      "0.0*-1",
      "-(0)",
      "-(0.0)",
      "3.0//0.7",
      "-3.0%0.7",
      "2.5%1",
      "-2.5//1",
      "-7.5//2",
      "7.5%-2",
      "5%-0.5",
      "0.0//-1",
      "-0.0%5",
      "1%0.3",
      "1.1*1.1",
      "3*1.1",
      "1e",
      big_float,
      big_float + "*0",
      "-" + big_float,
      big_float + "-" + big_float,
      "0." + std::string(320, '0') + "1",
      "0." + std::string(400, '0') + "1",
      "4.35",
      "2.675",
      "1/7*7",
      "0.1*3",
      "1.15*100",
      "9007199254740993.0",
      // the empty tuple
      "()",
      "(  )",
      "()*3",
      "3*()",
      "()+()",
      "(())",
      "()*0",
      "-()",
      "()+1",
      "()/1",
      "()*1.5",
      "1+()",
      // string counting
      "'strawberry'.count('r')",
      "\"strawberry\".count(\"r\")",
      "'Strawberry'.lower().count('s')",
      "'strawberry'.upper().count('R')",
      "'aaa'.count('aa')",
      "'abc'.count('')",
      "''.count('')",
      "'''a'b'''.count('a')",
      "\"\"\"x\"y\"\"\".count('y')",
      "b'abc'.count(b'a')",
      "'ab' 'cb'.count('b')",
      "('abc').count('a')",
      "( 'abc' ) . count ( 'a' )",
      "'abc' .count('a')",
      "().count(1)",
      "().count(())",
      "'x.count(y'.upper()",
      "b'x.count(y'",
      "b\"it's\".count(b'x')",
      "r'abc'.count('b')",
      "u'abc'.count('b')",
      "R'a'.count('a')",
      "f'aa'.count('a')",
      "rb'aa'.count(b'a')",
      "'mississippi'.count('ss')",
      "'a b c'.count(' ')",
      "'a1b1'.count('1')",
      "'abc'.count('A')",
      "'ABC'.lower().upper().count('B')",
      "'a'.count('a') 'b'",
      // rejections of use_calculator (all None)
      "2**10",
      "2 ** 3",
      "__import__('os')",
      "'a'.__class__",
      "'abc'.count('a') + 1",
      "'abc'.upper()",
      "'import'.count('i')",
      "'EVAL'.count('E')",
      "'Exec'.count('e')",
      "'dir'.count('d')",
      "'FILE'.count('f')",
      "'open'.count('o')",
      "'vars'.count('v')",
      "'Input'.count('i')",
      "'GLOBALS'.count('g')",
      "'locals'.count('l')",
      "'compile'.count('c')",
      "'getattr'.count('g')",
      "'setattr'.count('s')",
      "'delattr'.count('d')",
      "'hasattr'.count('h')",
      "'raw_input'.count('r')",
      "1/0",
      "1//0",
      "1%0",
      "1.0/0",
      "5/0.0",
      "1.5%0.0",
      "0.0//0.0",
      "0/0",
      "(1-1)/(2-2)",
      big_float + "/0",
      "1+",
      "(1",
      "1)",
      "",
      "  ",
      "1 2",
      "01",
      "007",
      "1.2.3",
      "1..2",
      "()()",
      "(1)(2)",
      "5.(3)",
      ".",
      "'abc'.count('a'",
      "'abc.count('a')",
      "'abc'.count(a)",
      "abc.count('a')",
      "'abc'.count()",
      "'abc'.count(1)",
      "'abc'.count('a')('b')",
      "b'abc'.count('a')",
      "'a' b'b'.count('a')",
      "'abc'.count('a').count('a')",
      "x = 1",
      "1;2",
      "print('a'.count('a'))",
      "'a'.count('a') 'b'x",
      "1 + 1\n",
      "\t1",
      "'abc'.find('a').count('a')",
      "1 .count('a')",
      "(1).count(1)",
  };
  expect_matches_python(exprs);
}

TEST(Calculator, RejectionsAreNone) {
  // the same rejections, asserted directly (they must not depend on the Python run)
  for (const char* e : {"2**10",
                        "__import__('os')",
                        "'abc'.count('a') + 1",
                        "'abc'.upper()",
                        "'import'.count('i')",
                        "'EVAL'.count('E')",
                        "'Dir'.count('d')",
                        "1/0",
                        "1//0",
                        "1%0",
                        "5/0.0",
                        "1+",
                        "(1",
                        "",
                        "1 2",
                        "01",
                        "'abc'.count(a)",
                        "'abc'.count(1)",
                        "x = 1",
                        "9223372036854775807+1",
                        "-9223372036854775807-2",
                        "3037000500*3037000500"})
    EXPECT_EQ(calculator_use(e), std::nullopt) << e;
}

TEST(Calculator, NestingAndLengthLimits) {
  // Python accepts 200 nested parentheses and rejects 201; unary chains of 1000 work
  auto nest = [](int n) { return std::string(n, '(') + "1" + std::string(n, ')'); };
  EXPECT_EQ(calculator_use(nest(200)), "1");
  EXPECT_EQ(calculator_use(nest(201)), std::nullopt);
  EXPECT_EQ(calculator_use(std::string(1000, '-') + "1"), "1");
  EXPECT_EQ(calculator_use(std::string(999, '-') + "1"), "-1");
  // the work bound that replaces upstream's 3 s alarm: longer inputs are refused outright
  std::string longest = "'" + std::string(kCalculatorMaxChars - 13, 'a') + "'.count('a')";
  ASSERT_EQ(longest.size(), kCalculatorMaxChars);
  EXPECT_EQ(calculator_use(longest), std::to_string(kCalculatorMaxChars - 13));
  EXPECT_EQ(calculator_use("'" + std::string(kCalculatorMaxChars, 'a') + "'.count('a')"), std::nullopt);
  // commas do not count against the limit: they are removed first (as upstream)
  EXPECT_EQ(calculator_use("1" + std::string(kCalculatorMaxChars, ',') + "000"), "1000");
}

TEST(Calculator, RandomArithmeticAgainstPython) {
  std::mt19937_64 rng(1234);
  auto pick = [&](int n) { return (int)(rng() % (uint64_t)n); };
  auto literal = [&]() -> std::string {
    switch (pick(6)) {
      case 0: return std::to_string(pick(10));
      case 1: return std::to_string(pick(1000));
      case 2: return std::to_string(pick(100)) + "." + std::to_string(pick(1000));
      case 3: return "." + std::to_string(pick(100));
      case 4: return std::to_string(pick(50)) + ".";
      default: return "0." + std::string(pick(4), '0') + std::to_string(1 + pick(99));
    }
  };
  const char* ops[] = {"+", "-", "*", "/", "//", "%"};
  // at most 6 literals below 1000: int intermediates stay inside int64
  std::function<std::string(int)> gen = [&](int budget) -> std::string {
    if (budget <= 1 || pick(3) == 0) return (pick(4) == 0 ? "-" : "") + literal();
    int left = 1 + pick(budget - 1);
    std::string e = gen(left) + " " + ops[pick(6)] + " " + gen(budget - left);
    return pick(3) == 0 ? "(" + e + ")" : e;
  };
  std::vector<std::string> exprs;
  for (int i = 0; i < 600; i++) exprs.push_back(gen(1 + pick(6)));
  expect_matches_python(exprs);
}

TEST(Calculator, FloatReprAgainstPython) {
  std::mt19937_64 rng(99);
  std::vector<double> xs = {0.1,
                            0.2,
                            0.3,
                            1.0,
                            10.0,
                            1e16,
                            1e15,
                            9999999999999998.0,
                            1e-4,
                            1e-5,
                            1.5e-7,
                            123456.789,
                            5e-324,
                            2.2250738585072014e-308,
                            1.7976931348623157e308,
                            1e22,
                            1e21,
                            0.30000000000000004,
                            100.0,
                            1.0 / 3,
                            2.0 / 3,
                            4.35,
                            -2.5,
                            -0.0,
                            0.0};
  for (int i = 0; i < 400; i++) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    if (std::isfinite(d)) xs.push_back(d);
    xs.push_back(std::ldexp((double)(rng() >> 11), -(int)(rng() % 120)));  // moderate magnitudes
  }
  std::vector<std::string> texts;
  for (double d : xs) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", d);  // exact round trip into Python's float()
    texts.push_back(buf);
  }
  auto ref = python_reference(texts, "repr");
  ASSERT_EQ(ref.size(), xs.size());
  for (size_t i = 0; i < xs.size(); i++) EXPECT_EQ(calculator_float_repr(xs[i]), *ref[i]) << texts[i];
  EXPECT_EQ(calculator_float_repr(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(calculator_float_repr(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(calculator_float_repr(std::nan("")), "nan");
}
