#!/usr/bin/env python3
"""Checks the user documentation against the program (docs/architecture.md §10, §12):

  options  every long option (--name) that `olmo2 --help` and `olmo2 SUBCOMMAND --help`
           print is named in README.md or docs/guides/*.md;
  readme   README.md, the front page, has fewer than 150 lines;
  links    every relative link in README.md and docs/guides/*.md names a file or folder
           that exists.

Usage: check_docs.py ROOT OLMO2_BINARY. Prints each problem on one line and exits 1 if
there is any, else prints a summary and exits 0.
"""
import re
import subprocess
import sys
from pathlib import Path

README_MAX_LINES = 150
# A long option where it stands alone: not the tail of a longer one (--pp in --pp-layers).
OPTION = re.compile(r"(?<![A-Za-z0-9-])--([a-z0-9][a-z0-9-]*)")
# The subcommand lines of `olmo2 --help`: "  train     --model-config FILE ...".
SUBCOMMAND = re.compile(r"^  ([a-z]+) {2,}\S", re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def help_text(binary: str, args: list) -> str:
    """What `binary args --help` prints; raises RuntimeError when it fails."""
    run = subprocess.run([binary, *args, "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(['olmo2', *args, '--help'])} exited {run.returncode}: {run.stderr.strip()}")
    return run.stdout


def documents(root: Path) -> list:
    return [root / "README.md", *sorted((root / "docs" / "guides").glob("*.md"))]


def check_options(root: Path, binary: str, seen: dict) -> list:
    """Every option of every `--help` that no document names, as 'olmo2 CMD --opt: …';
    `seen` gets each command's options."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in documents(root) if p.is_file())
    named = set(OPTION.findall(text))
    top = help_text(binary, [])
    commands = list(dict.fromkeys(SUBCOMMAND.findall(top)))
    if not commands:
        return ["olmo2 --help: no subcommands found in its output (has the usage text changed?)"]
    errors = []
    for command, out in [(None, top)] + [(c, help_text(binary, [c])) for c in commands]:
        where = "olmo2" if command is None else f"olmo2 {command}"
        seen[where] = list(dict.fromkeys(OPTION.findall(out)))
        for option in seen[where]:
            if option not in named:
                errors.append(f"{where} --{option}: printed by --help, named in neither README.md "
                              f"nor docs/guides/*.md")
    return errors


def check_readme(root: Path) -> list:
    lines = len((root / "README.md").read_text(encoding="utf-8").splitlines())
    if lines >= README_MAX_LINES:
        return [f"README.md: {lines} lines; the front page must stay under {README_MAX_LINES} "
                f"(move the details to docs/guides/)"]
    return []


def check_links(root: Path) -> list:
    """Relative links, outside code, whose target does not exist."""
    errors = []
    for doc in documents(root):
        if not doc.is_file():
            errors.append(f"{doc.relative_to(root)}: missing")
            continue
        text = INLINE_CODE.sub("", FENCE.sub("", doc.read_text(encoding="utf-8")))
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, mailto:, or an anchor in the same page
            path = target.split("#", 1)[0]
            if not (doc.parent / path).exists():
                errors.append(f"{doc.relative_to(root).as_posix()}: link ({target}) names no file")
    return errors


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: check_docs.py ROOT OLMO2_BINARY", file=sys.stderr)
        return 2
    root, binary = Path(sys.argv[1]).resolve(), sys.argv[2]
    if not list((root / "docs" / "guides").glob("*.md")):
        print("docs/guides/: no guides")
        return 1
    seen = {}
    try:
        errors = check_options(root, binary, seen)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        errors = [f"cannot read the options: {e}"]
    errors += check_readme(root) + check_links(root)
    for e in errors:
        print(e)
    print(f"docs: {sum(map(len, seen.values()))} options of {', '.join(seen)} checked; "
          f"{len(errors)} problem(s) in README.md and docs/guides/*.md")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
