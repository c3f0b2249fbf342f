"""Fails when a module includes one below it in docs/architecture.md's table of modules (an
arrow back up, and with it any loop between modules), or when a folder of src/ has no row there.
A module is src/<m>/ with include/nanochat/<m>.h and include/nanochat/<m>/; an include names a
module as "nanochat/<m>.h", "nanochat/<m>/..." or, inside src/, "<m>/...".

usage: python3 tests/lint/module_order.py ROOT
"""
import glob
import os
import re
import sys


def table_order(root):
    doc = open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8").read()
    return [m for m in re.findall(r"^\| ([a-z_]+) \|", doc, re.M) if m != "module"]


def module_files(root, m):
    files = glob.glob(f"{root}/src/{m}/**/*", recursive=True)
    files += glob.glob(f"{root}/include/nanochat/{m}/**/*", recursive=True)
    files.append(f"{root}/include/nanochat/{m}.h")
    return [f for f in files if re.search(r"\.(cpp|h|cu|cuh|inc)$", f) and os.path.isfile(f)]


def included_module(include, modules):
    m = re.match(r"nanochat/([a-z_]+)(?:\.h$|/)", include) or re.match(r"([a-z_]+)/", include)
    return m.group(1) if m and m.group(1) in modules else None


def main(root):
    order = table_order(root)
    place = {m: i for i, m in enumerate(order)}
    errors = []
    folders = sorted(d for d in os.listdir(os.path.join(root, "src")) if os.path.isdir(os.path.join(root, "src", d)))
    errors += [f"src/{d}/ has no row in docs/architecture.md's table of modules" for d in folders if d not in place]
    for m in order:
        for f in module_files(root, m):
            for include in re.findall(r'^\s*#\s*include\s+"([^"]+)"', open(f, errors="replace").read(), re.M):
                x = included_module(include, place)
                if x and place[x] > place[m]:
                    errors.append(f"{os.path.relpath(f, root)}: includes {include}, of {x}, "
                                  f"which docs/architecture.md puts below {m}")
    for e in errors:
        print(e)
    print(f"{len(order)} modules; {len(errors)} includes against the documented order")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
