#!/usr/bin/env python3
"""Checks every #include "..." of the project's C/C++ sources against the layer table of docs/architecture.md.

The table (the one whose header is "| layer | uses |") is the single source: each row names a folder
(`common/`, or a part of one such as `sharding/tools/`) and the layers it may include. A file belongs to the
row with the longest folder that holds it; so does an included header. An include is allowed when it stays in
the file's own row or reaches a row the "uses" cell names. A cell names rows by folder ("common, proto",
`sharding/tools`; every folder the cell mentions counts, prose included), "all of the above" or "everything"
(every row above it), or "nothing of the project".

The table itself must be layered: a row may only use rows listed above it. Every folder holding sources needs
a row, so a new folder cannot escape the check.

    python3 scripts/check_layers.py [--root DIR] [--doc docs/architecture.md] [--verbose]

Prints each offending include as "file:line: from-layer -> to-layer (include)" and exits 1; exits 0 when the
includes and the table agree.
"""

import argparse
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
from source_files import repository_files  # noqa: E402

SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".c", ".cc", ".cpp", ".cxx", ".inc", ".ipp", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ALL_ABOVE = re.compile(r"\b(all of the above|everything)\b")
NAME = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")


class TableError(Exception):
    pass


def parse_table(doc_path):
    """The layer table as an ordered list of (layer, cell text), layer without its trailing slash."""
    with open(doc_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows = []
    in_table = False
    for number, line in enumerate(lines, 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if not in_table:
            if cells and [c.lower() for c in cells] == ["layer", "uses"]:
                in_table = True
            continue
        if cells is None:
            break
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue  # the separator row
        if len(cells) != 2:
            raise TableError(f"{doc_path}:{number}: a row of the layer table needs 2 cells, got {len(cells)}")
        layer = cells[0].strip("`").strip().rstrip("/")
        if not NAME.fullmatch(layer):
            raise TableError(f"{doc_path}:{number}: '{cells[0]}' is not a folder")
        rows.append((layer, cells[1], number))
    if not rows:
        raise TableError(f"{doc_path}: no '| layer | uses |' table")
    return rows


def allowed_layers(rows, doc_path):
    """layer -> the set of layers it may include (itself included); checks each cell names rows above it."""
    allowed = {}
    errors = []
    seen = []
    for layer, cell, number in rows:
        if layer in allowed:
            errors.append(f"{doc_path}:{number}: layer '{layer}' has two rows")
        uses = {layer}
        if ALL_ABOVE.search(cell):
            uses.update(seen)
        # Names in the cell, backticked or not; words that are no layer ("nothing", "libtorch") are prose.
        for word in NAME.findall(cell.replace("`", " ")):
            name = word.rstrip("/.")
            if name in seen:
                uses.add(name)
            elif any(name == other for other, _, _ in rows):
                errors.append(f"{doc_path}:{number}: '{layer}' uses '{name}', which is listed below it "
                              "(a layer uses only layers listed before it)")
        allowed[layer] = uses
        seen.append(layer)
    return allowed, errors


def layer_of(path, layers):
    """The row with the longest folder holding `path` (repository-relative, '/'-separated), or None."""
    best = None
    for layer in layers:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def resolve(include, source, root, tops):
    """The repository path an include names, or None for a header outside the project.

    Project headers are included by their path from the root ("collectives/communicator.h"; generated ones
    such as proto/plan.pb.h exist only in the build); a few by their path from the including file's folder
    or from its top folder's include/ ("nccl.h").
    """
    if include.split("/")[0] in tops:
        return os.path.normpath(include).replace(os.sep, "/")
    here = os.path.dirname(source)
    for base in (here, source.split("/")[0] + "/include"):
        candidate = os.path.normpath(os.path.join(base, include)).replace(os.sep, "/")
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--doc", default="docs/architecture.md", help="relative to --root")
    parser.add_argument("--verbose", action="store_true", help="also print the edges found between layers")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    doc = os.path.join(root, args.doc)

    try:
        rows = parse_table(doc)
    except (OSError, TableError) as e:
        print(f"check_layers: {e}", file=sys.stderr)
        return 2
    allowed, problems = allowed_layers(rows, args.doc)
    layers = [layer for layer, _, _ in rows]
    tops = {layer.split("/")[0] for layer in layers}

    files = repository_files(root, SOURCE_SUFFIXES)
    edges = {}
    for source in files:
        from_layer = layer_of(source, layers)
        if from_layer is None:
            problems.append(f"{source}: its folder has no row in the layer table of {args.doc}")
            continue
        with open(os.path.join(root, source), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(m.group(1), source, root, tops)
                to_layer = layer_of(target, layers) if target else None
                if to_layer is None:
                    continue  # not a project header
                edges.setdefault((from_layer, to_layer), 0)
                edges[(from_layer, to_layer)] += 1
                if to_layer not in allowed[from_layer]:
                    problems.append(f"{source}:{number}: {from_layer} -> {to_layer} ({m.group(1)})")

    if args.verbose:
        for (a, b), n in sorted(edges.items()):
            if a != b:
                print(f"{a} -> {b}: {n} includes")
    for p in problems:
        print(p)
    if problems:
        print(f"check_layers: {len(problems)} problem(s) against the layer table of {args.doc}; fix the include "
              "or, where the layering is honest, the table", file=sys.stderr)
        return 1
    print(f"check_layers: {len(files)} files, {sum(edges.values())} project includes, all as {args.doc}'s table says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
