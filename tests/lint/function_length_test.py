#!/usr/bin/env python3
"""function_length.py's parser on hand-written code whose functions' lines are counted by hand:
free functions, methods in and out of a class, a constructor with an initializer list (braces in
it), lambdas and blocks inside a function, braces in strings, comments and raw strings, and
initializers at namespace scope that are not functions."""
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from function_length import functions  # noqa: E402

CODE = r'''// a file
#include <x>
namespace a {
namespace {
const int table[] = {1, 2,
                     3};
struct S : Base {
  int f() const { return 1; }
  S(int x)
      : x_{x}, y_(2) {
    x_++;
  }
};
}  // namespace

int g(int x) {
  auto l = [&](int y) {
    return y + 1;
  };
  if (x) { return l(x); }
  const char* s = "}}}{";  // }
  /* { */
  return R"x(}{)x"[0];
}

std::vector<int> S::h(const std::string& t) const noexcept {
  return {};
}
}  // namespace a
'''

found = {name: (first, last) for name, first, last in functions(CODE)}
expect = {"f": (8, 8), "S": (9, 12), "g": (16, 24), "S::h": (26, 28)}
ok = found == expect
print(("ok: " if ok else "FAIL: ") + f"found {found}, expected {expect}")
# the command line: a file with a 151-line function fails, naming it; 150 lines pass
with tempfile.TemporaryDirectory() as d:
    src = pathlib.Path(d, "src")
    src.mkdir()
    lint = pathlib.Path(__file__).with_name("function_length.py")
    for lines, want in ((150, 0), (151, 1)):
        (src / "f.cpp").write_text("void long_one() {\n" + "  x();\n" * (lines - 2) + "}\n")
        r = subprocess.run([sys.executable, str(lint), d], capture_output=True, text=True)
        good = r.returncode == want and (want == 0 or "src/f.cpp:1: long_one is 151 lines" in r.stdout)
        print(("ok: " if good else "FAIL: ") + f"{lines} lines: exit {r.returncode}, {r.stdout.strip()}")
        ok &= good
sys.exit(0 if ok else 1)
