#!/usr/bin/env python3
"""Prints the project's files over 600 lines and functions over 120 lines (the style's limits).

    python3 scripts/long_code.py [--root DIR] [--file-lines 600] [--function-lines 120] [--tests] [PATH ...]

C and C++ functions are found by matching braces: a brace at namespace, class or extern scope whose head
(the text since the previous declaration) holds a parameter list opens a function, lambdas and local
classes inside it included; a function runs from the first line of its head to its closing brace. Python
functions and methods come from ast, each nested one on its own. Declarative tables are exempt: put
`// long-code: declarative table` (`# ...` in Python) on the line before the function (before its template
or decorators), or `// long-code: declarative file` in a file's first ten lines to exempt the whole file.

A report, not a gate: always exits 0 (CI runs it as a warning).
"""

import argparse
import ast
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
from source_files import repository_files  # noqa: E402

MARKER = "long-code: declarative table"  # on the line before a function
FILE_MARKER = "long-code: declarative file"  # in a file's first ten lines
CXX_SUFFIXES = (".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".cu")
PY_SUFFIXES = (".py",)
SCOPE_HEAD = re.compile(r"^\s*(?:template\s*<.*>\s*)?(?:inline\s+)?(namespace|class|struct|union|enum|extern)\b",
                        re.S)
NON_SPACE = re.compile(r"\S")
CONTROL = re.compile(r"^\s*(?:if|for|while|switch|catch|do|else|try)\b")


def strip_cxx(text):
    """The text with comments, string and character literals blanked (newlines kept, so lines still count)."""
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
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^ ()\\\t\n]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000'000) is no character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
        elif c == "#" and (i == 0 or text[i - 1] == "\n" or text[:i].rsplit("\n", 1)[-1].strip() == ""):
            # A preprocessor line (with its continuations) is no code between braces.
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] != "\\":
                    break
                j = k + 1
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def cxx_functions(text):
    """(name, first line, last line) of each function at namespace, class or extern scope."""
    code = strip_cxx(text)
    line_at = []
    line = 1
    for ch in code:
        line_at.append(line)
        if ch == "\n":
            line += 1
    functions = []
    # Each open brace: its kind ("scope" for namespace/class/extern, "function", "other") and, for a
    # function, its head's first offset.
    stack = []
    head_start = 0  # where the current declaration at this scope began
    i = 0
    while i < len(code):
        ch = code[i]
        in_scope = all(kind == "scope" for kind, _ in stack)
        if ch == ";" and in_scope:
            head_start = i + 1
        elif ch == "{":
            head = code[head_start:i]
            if not in_scope:
                stack.append(("other", 0))
            elif SCOPE_HEAD.match(head) and not re.search(r"\)\s*(?:const\s*)?$", head.strip()):
                stack.append(("scope" if not re.match(r"^\s*enum\b", head) else "other", 0))
                head_start = i + 1
            elif "(" in head and not CONTROL.match(head) and not re.search(r"=\s*$", head.split("(")[0]):
                stack.append(("function", head_start))
            else:
                stack.append(("other", 0))
        elif ch == "}" and stack:
            kind, start = stack.pop()
            if all(k == "scope" for k, _ in stack):
                nxt = NON_SPACE.search(code, i + 1)
                # `b_{y},` or `b_{y} {` in a constructor's initializer list: its body is still to come.
                continues = nxt is not None and nxt.group() in ",{"
                if kind == "function" and not continues:
                    first = start
                    while first < i and code[first].isspace():
                        first += 1
                    paren = code.find("(", first, i)
                    words = code[first:paren].split() if paren >= 0 else []
                    functions.append((words[-1] if words else "?", line_at[first], line_at[i]))
                    head_start = i + 1
                elif kind != "function":
                    head_start = i + 1
        i += 1
    return functions


def python_functions(text, path):
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out.append((node.name, first, node.end_lineno))
    return out


def source_files(root, with_tests):
    files = repository_files(root, CXX_SUFFIXES + PY_SUFFIXES)
    return [p for p in files if with_tests or not (p.startswith("tests/") or "/tests/" in p)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--file-lines", type=int, default=600)
    parser.add_argument("--function-lines", type=int, default=120)
    parser.add_argument("--tests", action="store_true", help="also the test sources under tests/")
    parser.add_argument("paths", nargs="*", help="files to check (default: every tracked source)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    files = args.paths or source_files(root, args.tests)

    long_files, long_functions = [], []
    for path in files:
        full = path if os.path.isabs(path) else os.path.join(root, path)
        with open(full, encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.splitlines()
        if any(FILE_MARKER in line for line in lines[:10]):
            continue
        if len(lines) > args.file_lines:
            long_files.append((len(lines), path))
        functions = python_functions(text, path) if path.endswith(PY_SUFFIXES) else cxx_functions(text)
        for name, first, last in functions:
            length = last - first + 1
            if length <= args.function_lines:
                continue
            if first >= 2 and MARKER in lines[first - 2]:
                continue
            long_functions.append((length, path, first, name))

    for n, path in sorted(long_files, reverse=True):
        print(f"{path}: {n} lines (over {args.file_lines})")
    for n, path, first, name in sorted(long_functions, reverse=True):
        print(f"{path}:{first}: {name}: {n} lines (over {args.function_lines})")
    print(f"long_code: {len(long_files)} file(s) over {args.file_lines} lines, {len(long_functions)} function(s) over "
          f"{args.function_lines} lines in {len(files)} files (a warning; `{MARKER}` exempts a table)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
