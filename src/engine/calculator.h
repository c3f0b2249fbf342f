// The calculator tool of nanochat's engine (engine.py's use_calculator): upstream eval()s the model's
// expression under a 3 s SIGALRM. This is a small parser/evaluator instead: it never
// executes anything, uses no signals (safe on any thread, any OS), and bounds its work by
// the input's length (at most kCalculatorMaxChars characters, bounded nesting),
// which takes the place of the time limit.
//
// Accepted, after removing every ',' (the same gate as upstream):
//  - arithmetic: every character in "0123456789*+-/.() ", no "**"; Python's semantics for
//    + - * / // % and unary +/- on ints and floats (int/int true division is correctly
//    rounded, // and % floor, mixed int/float in float); the empty tuple "()" as Python
//    has it (() + (), () * n). Ints are 64-bit: where Python would grow past int64 the
//    result is None instead (no undefined behaviour).
//  - string counting: characters from letters, digits, '"()._ and space; none of the
//    forbidden words (__, import, exec, eval, ... case-insensitive); must contain ".count(".
//    Grammar: string literals ('..', "..", triple-quoted, r/u/f/b prefixes, adjacent
//    literals concatenate), parentheses and method chains .count(sub), .lower(), .upper()
//    on str/bytes (and ().count(x) == 0).
// Anything else -- a syntax error, ZeroDivisionError, TypeError, an unsupported name or
// method (Python would give a NameError or use a builtin method this subset lacks) -- is
// std::nullopt, so no output is injected.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace nanochat {

constexpr size_t kCalculatorMaxChars = 10000;
constexpr int kCalculatorMaxParens = 200;  // nested parentheses, Python's own limit
constexpr int kCalculatorMaxDepth = 1200;  // parentheses and unary signs together

// str(eval(expr)) with upstream's gates, or nullopt where upstream's use_calculator gives None
std::optional<std::string> calculator_use(std::string_view expr);

// Python's repr(float) (== str(float)): shortest round-trip digits, fixed notation for
// decimal exponents -4..15 ("0.0001", "10.0"), else "1e-05", "1e+16"; "inf", "-inf", "nan"
std::string calculator_float_repr(double x);

}  // namespace nanochat
