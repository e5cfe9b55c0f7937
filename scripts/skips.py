#!/usr/bin/env python3
"""Lists every skipped test of a ctest run and fails on one the allow-list does not name.

  scripts/skips.py JUNIT_XML PRESET [ALLOW_LIST]

JUNIT_XML is ctest's --output-junit file. A test is skipped when ctest says so (status "notrun":
GoogleTest's SKIP_REGULAR_EXPRESSION, a skip return code) and also when a test ctest ran as one
entry printed GoogleTest's "[  SKIPPED ]" (a plain add_test of several GoogleTest cases). The reason
is the line GoogleTest prints after "Skipped". ALLOW_LIST (default tests/skips-allowed.txt): lines
`PRESETS TEST_REGEX [REASON_REGEX]  # why`, PRESETS a comma-separated list or `*`; a skip whose test
fully matches the regex of an entry for this preset (and whose reason contains REASON_REGEX, when
given) is allowed. Exit 0 when every skip is allowed, 1 otherwise.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET


def reason(out):
    """GoogleTest prints `file:line: Skipped` then the message, up to the `[  SKIPPED ]` line."""
    lines = (out or "").splitlines()
    for i, line in enumerate(lines):
        if line.endswith(": Skipped"):
            msg = []
            for nxt in lines[i + 1:]:
                if nxt.startswith("[  SKIPPED ]"):
                    break
                msg.append(nxt.strip())
            return " ".join(m for m in msg if m) or "(no reason given)"
    return "(no reason given)"


def skipped_cases(out):
    """The GoogleTest cases an entry's output says were skipped."""
    return sorted(set(re.findall(r"^\[  SKIPPED \] (\S+) \(", out or "", re.M)))


def load_allow(path, preset):
    allowed = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split(None, 2)
            if len(parts) < 2 or "#" not in raw:
                sys.exit(f"{path}:{n}: expected `PRESETS TEST_REGEX [REASON_REGEX]  # why`")
            presets, regex = parts[0], parts[1]
            reason_re = re.compile(parts[2]) if len(parts) == 3 else None
            if presets == "*" or preset in presets.split(","):
                allowed.append((re.compile(regex), reason_re, raw.split("#", 1)[1].strip()))
    return allowed


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    junit, preset = sys.argv[1], sys.argv[2]
    allow_path = sys.argv[3] if len(sys.argv) == 4 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "skips-allowed.txt")
    allowed = load_allow(allow_path, preset)
    skips = []  # (test, reason)
    for case in ET.parse(junit).getroot().iter("testcase"):
        name, out = case.get("name"), case.findtext("system-out") or ""
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            skips.append((name, reason(out)))
        elif case.get("status") == "run":
            for inner in skipped_cases(out):  # hidden inside an entry that "passed"
                skips.append((f"{name} ({inner})", reason(out)))
    bad = 0
    for name, why in skips:
        ok = next((w for r, rr, w in allowed if r.fullmatch(name) and (rr is None or rr.search(why))), None)
        if ok is None:
            bad += 1
        print(f"skipped ({preset}): {name}: {why}" + (f"  [allowed: {ok}]" if ok else "  [NOT ALLOWED]"))
    print(f"{len(skips)} skipped in {preset}, {bad} not allowed ({os.path.relpath(allow_path)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
