#!/usr/bin/env python3
"""Every `// defines:` note at the top of a file under include/ and src/ names what the file really
declares or defines: each name listed must occur in the file as an identifier outside the note.
A note drifts when a function is renamed, moved or removed; this check fails on the first drift,
naming the file and the name. Forms understood: `name`, `Class::member`, `prefix_*` / `*_suffix` (some
identifier with that prefix or suffix), `nothing` (a header that only includes others)."""
import pathlib
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def note_and_body(text):
    """the names of the note (continuation lines start with `//` and spaces) and the rest"""
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
    # the list ends at the first `;` or `(`: what follows explains, it does not name
    note = re.split(r"[;(]", note, maxsplit=1)[0]
    out = []
    for item in note.split(","):
        item = item.strip().rstrip(".")
        if not item:
            continue
        out.append(item.split()[0])  # "checkpoint_* functions" -> "checkpoint_*"
    return out


def found(name, idents, body):
    if name.endswith("*"):
        return any(i.startswith(name[:-1]) for i in idents)
    if name.startswith("*"):
        return any(i.endswith(name[1:]) for i in idents)
    if "::" in name:
        return name.split("::")[-1] in idents
    return name in idents


def main(root):
    bad = []
    files = sorted(p for d in ("include", "src") for p in (root / d).rglob("*")
                   if p.suffix in (".h", ".cpp", ".cu", ".cuh"))
    checked = 0
    for path in files:
        note, body = note_and_body(path.read_text(errors="replace"))
        if note is None:
            continue
        checked += 1
        idents = set(IDENT.findall(body))
        for name in names_of(note):
            if not found(name, idents, body):
                bad.append(f"{path.relative_to(root)}: `// defines:` names {name}, which the file does not have")
    for line in bad:
        print(line)
    print(f"{checked} files with a `// defines:` note, {len(bad)} names that drifted")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
