#!/usr/bin/env python3
"""The architecture's arrows, checked on every build, as docs/DESIGN.md §3's layout table states them.

The table has a row per folder: its name in backticks, what lives there, and the folders its files may
include (backticked, "nothing", or "anything"). A file belongs to the longest folder of the table that
holds it; it may include files of its own folder and of those its row lists. Fails on: a top-level
folder, or a folder of shim/ or tools/, with no row; a row naming a folder that does not exist; an
include that points at a folder its row does not list; a cycle of includes, file by file. Each problem
names the file, the line and the rule. Run: layers_test.py REPO_ROOT.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|(.*)\|\s*$")
SOURCES = (".h", ".cc", ".c")
SKIP_DIRS = {"build", "dist", "__pycache__", "node_modules"}
# Folders whose every subfolder is a unit of the architecture and so needs a row of its own.
FLOORED = ("shim", "tools")


def folder(name):
    return name.strip().strip("/")


def read_table(design):
    """{folder: set of folders it may include, or None for anything} from §3's layout table."""
    with open(design, encoding="utf-8") as f:
        text = f.read()
    start = text.find("## 3. Architecture")
    end = text.find("\n## 4.", start)
    if start < 0 or end < 0:
        raise ValueError(f"{design}: no section '## 3. Architecture'")
    rows = {}
    for line in text[start:end].splitlines():
        m = ROW.match(line)
        if not m:
            continue
        allowed = m.group(3).strip()
        if allowed == "anything":
            rows[folder(m.group(1))] = None
        elif allowed == "nothing":
            rows[folder(m.group(1))] = set()
        else:
            rows[folder(m.group(1))] = {folder(x) for x in re.findall(r"`([^`]+)`", allowed)}
    if not rows:
        raise ValueError(f"{design}: §3 has no layout table (rows like | `folder/` | what | may include |)")
    return rows


def row_of(path, rows):
    """The longest folder of the table that holds `path` (repository-relative), or None."""
    best = None
    for name in rows:
        if (path == name or path.startswith(name + "/")) and (best is None or len(name) > len(best)):
            best = name
    return best


def resolve(root, included):
    for base in ("", "include/"):
        if os.path.isfile(os.path.join(root, base + included)):
            return base + included
    return None


def source_files(root):
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS
                             and not d.startswith("build"))
        for name in sorted(files):
            if name.endswith(SOURCES):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    try:
        rows = read_table(os.path.join(root, "docs", "DESIGN.md"))
    except (OSError, ValueError) as e:
        print(e)
        return 1
    problems = []
    for name in sorted(rows):
        if not os.path.isdir(os.path.join(root, name)):
            problems.append(f"DESIGN.md §3: `{name}/` has a row but no folder")
        for other in rows[name] or ():
            if not os.path.isdir(os.path.join(root, other)):
                problems.append(f"DESIGN.md §3: `{name}/` may include `{other}/`, which does not exist")
    for entry in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, entry)) and not entry.startswith(".") and entry not in SKIP_DIRS \
                and not entry.startswith("build") and not any(r == entry or r.startswith(entry + "/") for r in rows):
            problems.append(f"{entry}/: a top-level folder with no row in DESIGN.md §3")
    for top in FLOORED:
        for entry in sorted(os.listdir(os.path.join(root, top))):
            sub = f"{top}/{entry}"
            if os.path.isdir(os.path.join(root, sub)) and sub not in rows:
                problems.append(f"{sub}/: a folder of {top}/ with no row in DESIGN.md §3")

    graph = {}
    for rel in source_files(root):
        unit = row_of(rel, rows)
        if unit is None:
            problems.append(f"{rel}: in no folder of DESIGN.md §3")
            continue
        edges = graph.setdefault(rel, [])
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                found = resolve(root, m.group(1))
                if found is None:
                    continue  # a system or third-party header, or one beside the file
                edges.append(found)
                allowed = rows[unit]
                target = row_of(found, rows)
                if allowed is None or target == unit:
                    continue
                if target in allowed or any(found.startswith(a + "/") for a in allowed):
                    continue
                problems.append(f"{rel}:{lineno}: `{unit}/` includes {m.group(1)} (`{target}/`), "
                                f"which its row in DESIGN.md §3 does not list")

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
    if problems:
        print("\n".join(problems))
        print(f"{len(problems)} layering problem(s) in {len(graph)} files")
        return 1
    if len(graph) < 50:
        print(f"only {len(graph)} source files found under {root}: wrong root?")
        return 1
    print(f"{len(graph)} files in {len(rows)} folders: every include points where DESIGN.md §3 allows, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
