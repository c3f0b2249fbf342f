#!/usr/bin/env python3
"""Every `// defines:` note at the top of a file (anywhere in the repository) names what the file
declares or defines, both ways:
  - each name the note lists occurs in the file as an identifier outside the note;
  - each public name the file declares (a header: the classes, structs, enums, aliases, functions,
    constants and TORCH_MODULEs at namespace scope outside anonymous namespaces; a source file: the
    functions it defines with external linkage, a method by its class) is listed.
The whole note is read: names in parentheses (`GPT (GPTImpl)`) count as names. Forms understood:
`name`, `Class::member`, `prefix_*` / `*_suffix` (some identifier with that prefix or suffix),
`nothing` (a header that only includes others; what follows a `;` after it explains). A note
drifts when a function is added, renamed, moved or removed; this check names each drift.

    check_defines.py ROOT"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from function_length import blank  # noqa: E402

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SKIP_DIRS = {"build", ".venv", ".git", "third_party", "node_modules"}
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "decltype", "alignof", "static_assert",
            "__attribute__", "alignas", "noexcept", "template", "operator"}


def note_and_body(text):
    """the text of the note (continuation lines start with `//` and two spaces) and the rest"""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("// defines:"):
        return None, None
    note = [lines[0][len("// defines:"):]]
    i = 1
    while i < len(lines) and re.match(r"//\s{2,}\S", lines[i]):
        note.append(lines[i][2:])
        i += 1
    return " ".join(note), "\n".join(lines[i:])


def names_of(note):
    note = note.strip()
    if note.startswith("nothing"):
        return []
    out = []
    for item in re.split(r"[,()]", note):
        item = item.strip().rstrip(".")
        if item:
            out.append(item.split()[0])  # "checkpoint_* functions" -> "checkpoint_*"
    return out


def found(name, idents):
    if name.endswith("*"):
        return any(i.startswith(name[:-1]) for i in idents)
    if name.startswith("*"):
        return any(i.endswith(name[1:]) for i in idents)
    if "::" in name:
        return name.split("::")[-1] in idents
    return name in idents


def listed(name, names):
    """is a public name covered by the note's names?"""
    for n in names:
        if n == name or n.split("::")[0] == name:
            return True
        if n.endswith("*") and name.startswith(n[:-1]) or n.startswith("*") and name.endswith(n[1:]):
            return True
    return False


def declared_name(flat, header, has_body):
    """the public name a namespace-scope statement declares, or None"""
    flat = re.sub(r"^template\s*<[^{;]*?>\s*", "", flat)
    if not flat or flat.startswith(("friend ", "static_assert", "using namespace", "namespace ")):
        return None
    m = re.match(r"(class|struct|union|enum(?:\s+class)?)\s+(?:\[\[\w+\]\]\s*)?([A-Za-z_]\w*)", flat)
    if m and "(" not in flat[:m.start(2)]:
        return m.group(2) if (has_body or m.group(1).startswith("enum")) else None  # not a forward declaration
    m = re.match(r"using\s+([A-Za-z_]\w*)\s*=", flat)
    if m:
        return m.group(1)
    if flat.startswith(("using ", "typedef ")):
        m = re.match(r"typedef\s.*\b([A-Za-z_]\w*)\s*$", flat)
        return m.group(1) if m else None
    if re.match(r"static\b", flat) and not header:
        return None  # internal linkage
    m = re.match(r"([A-Z][A-Z0-9_]+)\s*\(\s*([A-Za-z_]\w*)", flat)
    if m:  # a macro call: TORCH_MODULE(X) declares X
        return m.group(2) if m.group(1) == "TORCH_MODULE" else None
    if re.search(r"\boperator\b", flat.split("(")[0]):
        return None  # an operator belongs to its type
    calls = [x for x in re.finditer(r"(~?[A-Za-z_][\w:]*)\s*\(", flat) if x.group(1).split("::")[-1] not in KEYWORDS]
    eq = flat.find("=")
    if calls and (eq < 0 or calls[0].start() < eq):  # a function
        if re.search(r"\boperator\b", flat[:calls[0].end()]):
            return None
        parts = calls[0].group(1).lstrip("~").split("::")
        if parts[0] == "nanochat":
            parts = parts[1:]
        if len(parts) > 1:
            return parts[-2]  # a method: its class
        return parts[0] if header or has_body else None  # a .cpp's own declaration is not a definition
    if not header:
        return None  # a source file's variables: its header lists them
    m = re.match(r"(?:(?:extern|inline|constexpr|const|static)\s+)*[\w:<>,\s*&]+?\b([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*(=|$)",
                 flat)
    return m.group(1) if m else None


def public_names(text, header):
    code = blank(text)
    code = re.sub(r"^[ \t]*#.*$", lambda m: " " * len(m.group(0)), code, flags=re.M)  # the preprocessor's lines
    names, stack, start = [], [], 0  # stack: "ns", "anon", "class", "body", "init", "other"
    for i, c in enumerate(code):
        outside = all(k in ("ns", "anon") for k in stack)
        public = all(k == "ns" for k in stack)
        if c == ";":
            if public:
                n = declared_name(" ".join(code[start:i].split()), header, False)
                if n:
                    names.append(n)
            if outside or stack[-1] == "class":
                start = i + 1
        elif c == "{":
            flat = " ".join(code[start:i].split())
            if not (outside or stack[-1] == "class"):
                stack.append("other")
            elif re.match(r"^(inline\s+)?namespace(\s+[\w:]+)?\s*$", flat):
                stack.append("ns" if re.search(r"namespace\s+\w", flat) else "anon")
                start = i + 1
            elif re.match(r'^extern\s*(""\s*)?$', flat):
                stack.append("ns")
                start = i + 1
            else:
                if public:
                    n = declared_name(flat, header, True)
                    if n:
                        names.append(n)
                if re.match(r"(template\s*<.*?>\s*)?(class|struct|union|enum)\b", flat) and "(" not in flat and "=" not in flat:
                    stack.append("class")
                    start = i + 1
                elif "=" in flat and "(" not in flat.split("=")[0]:
                    stack.append("init")  # an initializer: the statement goes on to its `;`
                else:
                    stack.append("body")
        elif c == "}" and stack:
            if stack.pop() in ("ns", "anon", "body", "class"):
                start = i + 1
    return list(dict.fromkeys(names))


def source_files(root):
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).parts
        if p.suffix in (".h", ".cpp", ".cu", ".cuh") and not SKIP_DIRS.intersection(rel) and \
                not any(part.startswith("build") for part in rel[:1]):
            yield p


def main(root):
    bad = []
    checked = 0
    for path in source_files(root):
        text = path.read_text(errors="replace")
        note, body = note_and_body(text)
        if note is None:
            continue
        checked += 1
        rel = path.relative_to(root)
        names = names_of(note)
        idents = set(IDENT.findall(body))
        for name in names:
            if not found(name, idents):
                bad.append(f"{rel}: `// defines:` names {name}, which the file does not have")
        if note.strip().startswith("nothing") and path.suffix in (".cpp", ".cu"):
            continue
        for name in public_names(body, path.suffix in (".h", ".cuh")):
            if not listed(name, names):
                bad.append(f"{rel}: defines {name}, which its `// defines:` note does not list")
    for line in bad:
        print(line)
    print(f"{checked} files with a `// defines:` note, {len(bad)} drifts")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
