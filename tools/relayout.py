"""Move semcheck's modules into the layout a newcomer reads at a glance (issue 16), and rewrite
every reference to them: `python tools/relayout.py` from the repository root, then commit.

    engines/explicit/   the explicit search and its reductions (search, reduction, independence,
                        endless, symmetry, store)
    engines/z3/         the z3 engine (engine, encoding, scope, terms, unroll, guided replay)
    engines/            what every engine shares (common, budget, components, causal, missing)
                        and the engines of their own (auto, simulate)
    frontends/capture   the kernel-script frontend's capture subprocess (was semcheck/capture.py)
    lower/tpu_kernel    the TPU kernel layout, named like lower/gpu_kernel.py (was lower/kernel.py)

Each move is a `git mv` (history follows the file); then imports are rewritten by their syntax
(`from semcheck.engines import explicit, smt` becomes one import per moved module, under the
name the file already used, so no call site changes), and dotted names and file paths in
code, strings, comments and documents are rewritten by text. Idempotent: a second run finds
nothing to move and nothing to rewrite. Written to be re-run after merging branches that
still use the old names; it prints every file it changed.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# old module -> new module
MOVES = {
    "semcheck.engines.explicit": "semcheck.engines.explicit.search",
    "semcheck.engines.reduction": "semcheck.engines.explicit.reduction",
    "semcheck.engines.independence": "semcheck.engines.explicit.independence",
    "semcheck.engines.endless": "semcheck.engines.explicit.endless",
    "semcheck.engines.symmetry": "semcheck.engines.explicit.symmetry",
    "semcheck.engines.store": "semcheck.engines.explicit.store",
    "semcheck.engines.smt": "semcheck.engines.z3.engine",
    "semcheck.engines.smt_encoding": "semcheck.engines.z3.encoding",
    "semcheck.engines.smt_scope": "semcheck.engines.z3.scope",
    "semcheck.engines.smt_terms": "semcheck.engines.z3.terms",
    "semcheck.engines.unroll": "semcheck.engines.z3.unroll",
    "semcheck.engines.guided": "semcheck.engines.z3.guided",
    "semcheck.capture": "semcheck.frontends.capture",
    "semcheck.lower.kernel": "semcheck.lower.tpu_kernel",
    # Issue 29: a labelled top level. `semcheck.cli` itself stays a name (the package exposes
    # `main`); cli.py became cli/command.py, and a branch that uses its other names is mended
    # by hand. sweep.py's task types and run_task are in run/tasks.py since.
    "semcheck.cli_options": "semcheck.cli.options",
    "semcheck.config": "semcheck.cli.config",
    "semcheck.gate": "semcheck.cli.gate",
    "semcheck.interrupts": "semcheck.cli.interrupts",
    "semcheck.checks": "semcheck.run.checks",
    "semcheck.sweep": "semcheck.run.sweep",
    "semcheck.sweep_ray": "semcheck.run.sweep_ray",
    "semcheck.prefix": "semcheck.run.prefix",
    "semcheck.provenance": "semcheck.run.provenance",
    "semcheck.expectations": "semcheck.run.expectations",
    "semcheck.assumptions": "semcheck.passes.assumptions",
    "semcheck.core_entry": "semcheck.passes.core_entry",
    "semcheck.invocations": "semcheck.passes.invocations",
    "semcheck.programs": "semcheck.passes.programs",
    "semcheck.operands": "semcheck.frontends.operands",
    # Issue 29, section 1: the semantics as a package. `semcheck.semantics` itself stays a name
    # (the package re-exports what semantics.py exported: System, State, Event, ...); the
    # names that were private and used across modules became public, and a branch that uses
    # the old ones is mended by hand: `_Fault` -> `Fault`, `_bits` -> `bits`,
    # `system._candidates` -> `candidates`, `_cell_candidates` / `_lifecycle_candidates` ->
    # without the underscore, `_allocs` -> `allocs`, `_buffers` -> `buffer_allocs`,
    # `_instance_id` / `_buffer_instance_id` / `_region_instances` -> without it,
    # `_resolve` -> `resolve_all`, `semantics._sem_refs` -> `semantics.instructions.sem_refs`.
    "semcheck.footprints": "semcheck.semantics.footprints",
    "semcheck.ordering": "semcheck.semantics.ordering",
    "semcheck.cells": "semcheck.semantics.cells",
    "semcheck.instances": "semcheck.semantics.instances",
    "semcheck.resource_index": "semcheck.semantics.resource_index",
    "semcheck.properties": "semcheck.semantics.properties",
    "semcheck.trace": "semcheck.semantics.trace",
}

NEW_MODULES = set(MOVES.values())

NEW_PACKAGES = {
    "semcheck/engines/explicit": "The explicit-state engine: exhaustive search (`search.py`) with partial-order\n"
                                 "reduction (`reduction.py`, `independence.py`), symmetry reduction (`symmetry.py`),\n"
                                 "the packed state store (`store.py`) and lasso detection for loops that never\n"
                                 "end (`endless.py`).",
    "semcheck/engines/z3": "The z3 engine: the protocol unrolled (`unroll.py`) and encoded as SMT constraints\n"
                           "(`encoding.py`, `scope.py`, `terms.py`), solved (`engine.py`), and each answer\n"
                           "replayed through the semantics (`guided.py`).",
}

# A moved file that finds the repository from its own path now sits one folder deeper.
DEPTH_FIXES = {
    "semcheck/frontends/capture.py": (
        "package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
        "package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
    ),
}

# Whole-text replacements where a sentence names the old layout (old text -> new text).
PROSE = {
    "docs/architecture.md": [(
        "`engines/`: `explicit.py` with `independence.py` and `reduction.py` (its own bookkeeping), "
        "`smt*.py` (z3), `simulate.py`, `auto.py`, `components.py`, `causal.py`, `missing.py`",
        "`engines/explicit/` (the search, with `independence.py` and `reduction.py`, its own "
        "bookkeeping, and `endless.py`), `engines/z3/` (the z3 engine: unrolling, encoding, solving, "
        "guided replay), and beside them what every engine shares (`common.py`, `budget.py`, "
        "`components.py`, `causal.py`, `missing.py`) and the engines of their own (`auto.py`, "
        "`simulate.py`)",
    ), (
        "`capture.py` and `operands.py` (the capture subprocess",
        "`frontends/capture.py` and `operands.py` (the capture subprocess",
    )],
}

SCANNED = ("semcheck", "tests", "benchmarks", "docs", "tools")
SCANNED_FILES = ("README.md", "pyproject.toml", ".ci/run", "action.yml")
TEXT_SUFFIXES = (".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".cfg", ".ini", "")


def path_of(module: str) -> str:
    return module.replace(".", "/") + ".py"


def move_files() -> list[str]:
    done = []
    for old, new in MOVES.items():
        src, dst = path_of(old), path_of(new)
        if not os.path.exists(os.path.join(ROOT, src)) or os.path.exists(os.path.join(ROOT, dst)):
            continue
        package = os.path.dirname(dst)
        init = os.path.join(ROOT, package, "__init__.py")
        if not os.path.exists(init):
            os.makedirs(os.path.dirname(init), exist_ok=True)
            with open(init, "w", encoding="utf-8") as f:
                f.write(f'"""{NEW_PACKAGES.get(package, package)}\n"""\n')
            subprocess.run(["git", "add", os.path.relpath(init, ROOT)], cwd=ROOT, check=True)
        subprocess.run(["git", "mv", src, dst], cwd=ROOT, check=True)
        fix = DEPTH_FIXES.get(dst)
        if fix:
            _replace_in(dst, *fix)
        done.append(f"{src} -> {dst}")
    return done


def _replace_in(relative: str, old: str, new: str) -> bool:
    path = os.path.join(ROOT, relative)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if old not in text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new))
    return True


# --- imports, by syntax ----------------------------------------------------------------------


def _split(module: str) -> tuple[str, str]:
    parent, _, leaf = module.rpartition(".")
    return parent, leaf


def _alias(name: str, asname: str | None) -> str:
    return name if asname in (None, name) else f"{name} as {asname}"


def rewrite_import(node: ast.stmt) -> list[str] | None:
    """The statements replacing `node`, or None when it imports nothing that moved."""
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if node.module in MOVES and not all(f"{node.module}.{a.name}" in NEW_MODULES for a in node.names):
            # names from inside a moved module (not the new package's own modules)
            names = ", ".join(_alias(a.name, a.asname) for a in node.names)
            return [f"from {MOVES[node.module]} import {names}"]
        kept, moved = [], []
        for a in node.names:
            full = f"{node.module}.{a.name}"
            if full in MOVES:
                parent, leaf = _split(MOVES[full])
                moved.append(f"from {parent} import {_alias(leaf, a.asname or a.name)}")
            else:
                kept.append(_alias(a.name, a.asname))
        if not moved:
            return None
        return ([f"from {node.module} import {', '.join(kept)}"] if kept else []) + moved
    if isinstance(node, ast.Import):
        if not any(a.name in MOVES for a in node.names):
            return None
        return [f"import {', '.join(_alias(MOVES.get(a.name, a.name), a.asname) for a in node.names)}"]
    return None


def rewrite_imports(text: str) -> tuple[str, set[int]]:
    """`text` with its moved imports rewritten, and the line numbers (0-based, in the result)
    of every import statement, which the text rules leave alone."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text, set()
    lines = text.splitlines(keepends=True)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    replaced: list[tuple[int, int, list[str]]] = []
    for node in imports:
        new = rewrite_import(node)
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        # Only statements that own their lines (no `x = 1; import y`) are rewritten.
        if new is None or lines[first][: node.col_offset].strip() or lines[last][node.end_col_offset:].strip(" \\\n#"):
            replaced.append((first, last, []))
            continue
        indent = lines[first][: node.col_offset]
        tail = lines[last][node.end_col_offset:].rstrip("\n")
        replaced.append((first, last, [indent + s + (tail if i == len(new) - 1 else "") + "\n" for i, s in enumerate(new)]))
    protected: set[int] = set()
    offset = 0
    for first, last, new in sorted(replaced):
        if new:
            lines[first + offset:last + offset + 1] = new
            protected.update(range(first + offset, first + offset + len(new)))
            offset += len(new) - (last - first + 1)
        else:
            protected.update(range(first + offset, last + offset + 1))
    return "".join(lines), protected


# --- names and paths, by text ----------------------------------------------------------------


def _text_rules() -> list[tuple[re.Pattern, str]]:
    rules = []
    children = {}
    for new in MOVES.values():
        parent, leaf = _split(new)
        children.setdefault(parent, set()).add(leaf)
    for old, new in MOVES.items():
        # A dotted name, unless it already goes on into the package the old module became.
        inside = "|".join(sorted(children.get(old, ())))
        guard = rf"(?!\.(?:{inside})\b)" if inside else ""
        rules.append((re.compile(rf"(?<![\w.]){re.escape(old)}\b{guard}"), new))
        # Its file path, from the repository root or from the package.
        old_path, new_path = path_of(old), path_of(new)
        rules.append((re.compile(rf"(?<![\w./-]){re.escape(old_path)}"), new_path))
        old_inner, new_inner = old_path.removeprefix("semcheck/"), new_path.removeprefix("semcheck/")
        if "/" in old_inner:  # a top-level module's bare name (`gate.py`) may name another file
            rules.append((re.compile(rf"(?<![\w./-]){re.escape(old_inner)}"), new_inner))
    return rules


RULES = _text_rules()
# Where each moved file came from: a bare file name in it (`unroll.py`) names a neighbour there.
ORIGIN = {path_of(new): os.path.dirname(path_of(old)) for old, new in MOVES.items()}


def _neighbour_rules(relative: str) -> list[tuple[re.Pattern, str]]:
    """Bare file names (`explicit.py`, `smt_encoding.py`) in a module of the folder they were
    in, rewritten to where those files are now, relative to this file's own folder. A name
    followed by `:line` is a user's file in an example message, not ours."""
    origin = ORIGIN.get(relative, os.path.dirname(relative))
    rules = []
    for old, new in MOVES.items():
        old_path, new_path = path_of(old), path_of(new)
        if os.path.dirname(old_path) != origin:
            continue
        leaf = os.path.basename(old_path)
        target = os.path.relpath(new_path, os.path.dirname(relative))
        if target != leaf:
            rules.append((re.compile(rf"(?<![\w./-]){re.escape(leaf)}\b(?!:\d)"), target))
    return rules


def rewrite_text(text: str, protected: set[int], relative: str = "") -> str:
    rules = RULES + (_neighbour_rules(relative) if relative.startswith("semcheck/") else [])
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if i in protected:
            continue
        for pattern, new in rules:
            line = pattern.sub(new, line)
        lines[i] = line
    return "".join(lines)


def files() -> list[str]:
    found = [f for f in SCANNED_FILES if os.path.exists(os.path.join(ROOT, f))]
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".venv")]
            for name in names:
                if os.path.splitext(name)[1] in TEXT_SUFFIXES:
                    found.append(os.path.relpath(os.path.join(folder, name), ROOT))
    me = os.path.relpath(os.path.abspath(__file__), ROOT)
    return sorted(f for f in found if f != me)


def rewrite_file(relative: str) -> bool:
    path = os.path.join(ROOT, relative)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (UnicodeDecodeError, IsADirectoryError):
        return False
    new, protected = rewrite_imports(text) if relative.endswith(".py") else (text, set())
    new = rewrite_text(new, protected, relative)
    for old, replacement in PROSE.get(relative, ()):
        new = new.replace(old, replacement)
    if new == text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True


def main() -> int:
    moved = move_files()
    changed = [f for f in files() if rewrite_file(f)]
    for line in moved:
        print("moved", line)
    for f in changed:
        print("rewrote", f)
    if not moved and not changed:
        print("nothing to do: the layout is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
