#!/usr/bin/env python3
"""Lists the functions longer than N lines (default 75) in the workspace's Rust
sources: from the `fn` line to its matching closing brace. Test code is left out
(files under tests/, `#[cfg(test)]` modules, `#[test]` functions).
Usage: scripts/long-fns.py [N] [paths...]"""
import os
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept),
    so braces can be counted."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif re.match(r'(b?r#*")', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:  # a char literal, not a lifetime
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(lines, start):
    """The index of the line closing the first `{` at or after `start`, or None
    when a `;` comes first (a declaration without a body)."""
    depth = 0
    opened = False
    for k in range(start, len(lines)):
        for ch in lines[k]:
            if ch == ";" and not opened and depth == 0:
                return None
            if ch == "{":
                depth += 1
                opened = True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return k
    return None


def functions(path):
    with open(path, encoding="utf-8") as f:
        lines = code_only(f.read()).split("\n")
    skip_until = -1
    pending_test = False
    for i, line in enumerate(lines):
        if i <= skip_until:
            continue
        s = line.strip()
        if s.startswith("#[cfg(test)]") or s.startswith("#[test]") or s.startswith("#[tokio::test"):
            pending_test = True
            continue
        if pending_test and (s.startswith("mod ") or s.startswith("pub mod ")):
            end = block_end(lines, i)
            skip_until = end if end is not None else i
            pending_test = False
            continue
        m = FN.match(line)
        if m:
            end = block_end(lines, i)
            if end is None:
                continue
            if not pending_test:
                yield m.group(7), i + 1, end - i + 1
            pending_test = False
        elif s and not s.startswith("#["):
            pending_test = False


def main():
    args = sys.argv[1:]
    limit = 75
    if args and args[0].isdigit():
        limit = int(args.pop(0))
    roots = args or ["crates"]
    found = []
    for root in roots:
        if os.path.isfile(root):
            found += [(n, root, at, ln) for n, at, ln in functions(root) if ln > limit]
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if x not in ("target", "tests"))
            for name in sorted(files):
                if name.endswith(".rs"):
                    p = os.path.join(d, name)
                    found += [(n, p, at, ln) for n, at, ln in functions(p) if ln > limit]
    for n, p, at, ln in sorted(found, key=lambda x: -x[3]):
        print(f"{ln:5}  {p}:{at}  {n}")


if __name__ == "__main__":
    main()
