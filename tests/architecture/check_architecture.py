#!/usr/bin/env python3
"""Checks the shape of the code base that the compiler does not (docs/architecture.md §1):

  layering   every #include of a project header goes to the including file's own
             library or to one it links (directly or not), read from the folders'
             CMakeLists.txt; ops/cpu/ and ops/cuda/ headers are private to ops/
             (tests excepted).
  cycles     no include cycle among the project's headers.
  citations  code comments cite docs/architecture.md, never a document the repository
             does not contain ("DESIGN §4", "case C4", "issue #7", "notes/…").

Usage: check_architecture.py ROOT {layering,cycles,citations,all}. Prints every
violation with file:line and exits 1 when there is one.
"""
import os
import re
import sys
from pathlib import Path

LIBRARY_FOLDERS = ["core", "ops", "ops/simt", "parallel", "runtime/io", "runtime/model", "runtime/trace", "runtime/tokenizer",
                   "runtime/structured", "runtime/structured/vocab",
                   "runtime/generation", "runtime/train", "runtime/serve", "runtime/serve/http", "runtime/serve/chat",
                   "runtime/serve/api", "monitoring", "launcher"]
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".inc"}
INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')


def resolve(root: Path, including: Path, name: str) -> str:
    """The repository path an include names: relative to the including file when that
    file exists (quoted includes search there first), else relative to the root (the
    build puts the root on the include path, for quotes and angle brackets alike)."""
    beside = (including.parent / name).resolve()
    if beside.is_file() and root in beside.parents:
        return beside.relative_to(root).as_posix()
    return Path(os.path.normpath(name)).as_posix()


def library_of_folder(root: Path, folder: str) -> str:
    text = (root / folder / "CMakeLists.txt").read_text()
    m = re.search(r"add_library\((olmo2_\w+)", text)
    if not m:
        raise SystemExit(f"{folder}/CMakeLists.txt declares no olmo2_* library")
    return m.group(1)


def declared_links(root: Path, folder: str, lib: str) -> set:
    text = (root / folder / "CMakeLists.txt").read_text()
    deps = set()
    for m in re.finditer(r"target_link_libraries\(\s*" + lib + r"\b(.*?)\)", text, re.S):
        deps.update(re.findall(r"\bolmo2_\w+", m.group(1)))
    return deps


def folder_of(path: str):
    """The library folder a repository path belongs to (longest match), or None."""
    best = None
    for f in LIBRARY_FOLDERS:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def sources(root: Path, folders):
    """The source files of `folders`, each once (a file in a nested library folder, such
    as runtime/serve/api/ inside runtime/serve/, belongs to the nested one)."""
    for f in folders:
        for p in sorted((root / f).rglob("*")):
            rel = p.relative_to(root).as_posix()
            if p.suffix in SOURCE_SUFFIXES and p.is_file() and (folder_of(rel) in (f, None) or f not in LIBRARY_FOLDERS):
                yield p


def check_layering(root: Path) -> list:
    lib = {f: library_of_folder(root, f) for f in LIBRARY_FOLDERS}
    folder = {v: k for k, v in lib.items()}
    direct = {f: declared_links(root, f, lib[f]) for f in LIBRARY_FOLDERS}
    closure = {}
    for f in LIBRARY_FOLDERS:  # every library reachable from f's
        seen, todo = set(), list(direct[f])
        while todo:
            d = todo.pop()
            if d in seen or d not in folder:
                continue
            seen.add(d)
            todo.extend(direct[folder[d]])
        closure[f] = {folder[d] for d in seen} | {f}
    errors = []
    for p in sources(root, LIBRARY_FOLDERS):
        rel = p.relative_to(root).as_posix()
        mine = folder_of(rel)
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = resolve(root, p, m.group(1))
            target = folder_of(name)
            if target is None or not (root / name).is_file():
                continue  # a system or library header
            if target not in closure[mine]:
                errors.append(f"{rel}:{n}: includes {name} of {lib[target]}, which {lib[mine]} does not link "
                              f"(it links {', '.join(sorted(lib[f] for f in closure[mine] if f != mine)) or 'nothing'})")
            if re.match(r"ops/(cpu|cuda)/", name) and mine != "ops":
                errors.append(f"{rel}:{n}: includes {name}, a private header of ops/ (use the op's public header)")
    return errors


def check_cycles(root: Path) -> list:
    graph = {}
    for p in sources(root, LIBRARY_FOLDERS + ["tests", "bench"]):
        rel = p.relative_to(root).as_posix()
        if p.suffix not in {".h", ".cuh", ".inc"}:
            continue
        deps = []
        for line in p.read_text(errors="replace").splitlines():
            m = INCLUDE.match(line)
            if m and (root / resolve(root, p, m.group(1))).is_file():
                deps.append(resolve(root, p, m.group(1)))
        graph[rel] = deps
    errors, state, stack = [], {}, []

    def visit(h):
        state[h] = 1
        stack.append(h)
        for d in graph.get(h, []):
            if state.get(d) == 1:
                errors.append("include cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[h] = 2

    for h in sorted(graph):
        if h not in state:
            visit(h)
    return errors


# A citation of a document outside the repository, or of a case or issue by its number only.
FORBIDDEN = [
    (re.compile(r"\bDESIGN(\.md)?\b"), "cites DESIGN.md, which is not in the repository"),
    (re.compile(r"\b[Cc]ases?\s+C\d"), "cites a case by its number only"),
    (re.compile(r"\b[Ii]ssue\s*#?\s*\d"), "cites an issue number"),
    (re.compile(r"\bnotes/[\w.-]+"), "cites a notes/ document outside the repository"),
    (re.compile(r"olmo2-reference\.md|infrastructure\.md|shared/cases"), "cites a document outside the repository"),
]
CITATION_FILES = {".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".cmake", ".ini", ".yml", ".yaml"}


def check_citations(root: Path) -> list:
    errors = []
    paths = [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts and "build" not in p.parts[:1]
             and (p.suffix in CITATION_FILES or p.name == "CMakeLists.txt")]
    this = Path(__file__).resolve()
    for p in sorted(paths):
        if p.resolve() == this or not (p.relative_to(root).parts[0] not in {"build", "data", "runs", ".venv-clients"}):
            continue
        rel = p.relative_to(root).as_posix()
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            for pattern, why in FORBIDDEN:
                if pattern.search(line):
                    errors.append(f"{rel}:{n}: {why}: {line.strip()[:120]}")
            # A section sign must point into the design of record (or a standard: RFC, Unicode).
            if "§" in line and "architecture.md" not in line and not re.search(r"RFC|Unicode", line):
                prev = p.read_text(errors="replace").splitlines()[n - 2] if n > 1 else ""
                if "architecture.md" not in prev:
                    errors.append(f"{rel}:{n}: a § that does not name docs/architecture.md: {line.strip()[:120]}")
    return errors


def main() -> int:
    root, what = Path(sys.argv[1]).resolve(), sys.argv[2]
    checks = {"layering": check_layering, "cycles": check_cycles, "citations": check_citations}
    errors = []
    for name, check in checks.items():
        if what in (name, "all"):
            errors += check(root)
    for e in errors:
        print(e)
    print(f"{what}: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
