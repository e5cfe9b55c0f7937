#!/usr/bin/env python3
"""The architecture's arrows, checked on every build (DESIGN.md §3).

Each folder may include only the folders below it; no file includes itself through a cycle. A
violation names the file, the line and the rule it breaks. Run: layers_test.py REPO_ROOT.
"""
import os
import re
import sys

# Folder → the folders its files may include (itself always). Order is the architecture's:
# include/p2ptrace → core → probe → the shim's floors → tools, the shim and the CLI apart.
ALLOWED = {
    "include": set(),
    "core": {"include"},
    "probe": {"include", "core"},
    "shim/base": {"include", "core"},
    "shim/record": {"include", "core", "shim/base"},
    "shim": {"include", "core", "probe", "shim/base", "shim/record"},
    "shim/interpose": {"include", "core", "probe", "shim/base", "shim/record", "shim"},
    "shim/audit": {"include"},
    "tools": {"include", "core", "probe"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def unit_of(path):
    """The folder a file (by its path in the repository, or as an include names it) belongs to."""
    if path.startswith(("include/p2ptrace/", "p2ptrace/")):
        return "include"
    parts = path.split("/")
    if len(parts) < 2:
        return None
    if parts[0] == "shim" and len(parts) > 2:
        return "shim/" + parts[1]
    return parts[0]


def resolve(root, path):
    for base in ("", "include/"):
        if os.path.isfile(os.path.join(root, base + path)):
            return base + path
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    problems, graph = [], {}
    for top in ("include", "core", "probe", "shim", "tools"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                unit = unit_of(rel)
                if unit not in ALLOWED:
                    problems.append(f"{rel}: folder {unit} has no place in the layering (add it to ALLOWED)")
                    continue
                edges = graph.setdefault(rel, [])
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = unit_of(m.group(1))
                        if target is not None and target != unit and target in ALLOWED and target not in ALLOWED[unit]:
                            problems.append(f"{rel}:{lineno}: {unit} includes {m.group(1)} ({target}), "
                                            f"which is not below it")
                        found = resolve(root, m.group(1))
                        if found:
                            edges.append(found)
    # A cycle of includes, file by file.
    state = {}

    def visit(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                problems.append("include cycle: " + " -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    files = len(graph)
    if problems:
        print("\n".join(problems))
        print(f"{len(problems)} layering problem(s) in {files} files")
        return 1
    if files < 50:
        print(f"only {files} source files found under {root}: wrong root?")
        return 1
    print(f"{files} files: every include points down the layers, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
