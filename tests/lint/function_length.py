#!/usr/bin/env python3
"""No function in src/ longer than 150 lines (the project's rule; tests and benches apart).

    function_length.py ROOT            fail, naming each function over the limit
    function_length.py ROOT --top N    list the N longest functions (for measuring)

A function's length is its lines from the one holding its name to its closing brace. The
parser is a brace counter over the code with comments, strings and character literals blanked:
a `{` at namespace or class scope opens a function body when the text before it ends a
parameter list (`)` with optional qualifiers, or a constructor's initializer list); lambdas and
blocks count toward the function that holds them."""
import pathlib
import re
import sys

LIMIT = 150
SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|\bextern\s*$")
BODY = re.compile(r"\)(\s*(const|noexcept|override|final|mutable|&&|&|->\s*[\w:<>,\s*&]+))*\s*$")
CTOR = re.compile(r"\)\s*:\s*[\w:]+\s*[({]")
NAME = re.compile(r"(~?[A-Za-z_][\w:]*(?:operator\s*\S+?)?)\s*\(")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "alignof", "static_assert",
            "__attribute__", "alignas", "noexcept", "template"}


def blank(text):
    """comments, string and char literals as spaces (newlines kept, so lines still count)"""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j])); i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(c); i += 1; continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else "")); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of each function body in the file"""
    code = blank(text)
    stack = []       # per open brace: "scope", "func" (with its start) or "other"
    head_start = 0   # where the declaration before the next brace begins
    found = []
    for i, c in enumerate(code):
        at_scope = all(k == "scope" for k, _ in stack)
        if c == ";" and at_scope:
            head_start = i + 1
        elif c == "{":
            if not at_scope:
                stack.append(("other", None))
                continue
            head = code[head_start:i]
            flat = " ".join(head.split())
            if SCOPE.search(flat) and "(" not in flat.split("{")[0].split("=")[0] and "=" not in flat:
                stack.append(("scope", None)); head_start = i + 1
            elif "=" not in flat.split("(")[0] and (BODY.search(flat) or (CTOR.search(flat) and code[i - 1].isspace())):
                names = [m for m in NAME.findall(flat) if m.split("::")[-1] not in KEYWORDS]
                name = names[0] if names else "?"
                line = code.count("\n", 0, head_start + len(head) - len(head.lstrip())) + 1
                stack.append(("func", (name, line)))
            else:
                stack.append(("other", None))  # an initializer at scope: part of the declaration
        elif c == "}" and stack:
            kind, info = stack.pop()
            if kind == "func":
                found.append((info[0], info[1], code.count("\n", 0, i) + 1))
            if kind in ("func", "scope"):
                head_start = i + 1
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    top = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--top" else 0
    rows = []
    for path in sorted((root / "src").rglob("*")):
        if path.suffix in (".cpp", ".h", ".cu", ".cuh"):
            for name, first, last in functions(path.read_text(errors="replace")):
                rows.append((last - first + 1, str(path.relative_to(root)), first, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    if top:
        for n, path, line, name in rows[:top]:
            print(f"{n:5d}  {path}:{line}  {name}")
        return 0
    over = [r for r in rows if r[0] > LIMIT]
    for n, path, line, name in over:
        print(f"{path}:{line}: {name} is {n} lines (the limit is {LIMIT}): split it into named steps")
    if over:
        return 1
    print(f"{len(rows)} functions in src/, none over {LIMIT} lines (longest: {rows[0][0]}, {rows[0][3]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
