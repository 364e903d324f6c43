"""docs_options.py ROOT SDPA — every `sdpa SUBCOMMAND ... --option` that README.md and docs/*.md show
is an option that subcommand's --help lists, and every `bench/NAME.py ... --option` (or examples/) one
that script's argparse defines, so the docs cannot drift from the command lines.

What counts as a use: a code span or a code-block command where `sdpa` (alone or as a path's last
part, build/bin/sdpa) is followed by one of the subcommands `sdpa --help` lists (and, for a subcommand
that has its own, one of those: `sdpa lab variance`); the options are the --words after it up to the end
of that shell command (a pipe, ;, && or || between spaces). The subcommands and their options are read
from the binary's help, never listed here. A script's options are read from its source without running
it (they import torch): the string arguments of its add_argument calls, and those of the sibling modules
it imports (bench/hf_llama.py's shape options). Run by tests/cli/cli_test.sh (case docs_options) with
Debian's /usr/bin/python3.
"""
import ast
import pathlib
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")  # a long option, not the tail of a longer word


def help_text(sdpa: str, words: list) -> str:
    run = subprocess.run([sdpa, *words, "--help"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"FAIL: {' '.join(['sdpa', *words, '--help'])} exited {run.returncode}: {run.stderr.strip()}")
    return run.stdout


def subcommands(text: str) -> list:
    """The names under a help text's "Subcommands:" heading (CLI11's layout: two spaces, the name, its text)."""
    _, _, tail = text.partition("\nSubcommands:\n")
    return re.findall(r"^  ([a-z][a-z0-9-]*)\s", tail, flags=re.M)


def options(text: str) -> set:
    return set(OPTION.findall(text))


def script_options(path: pathlib.Path, seen=None) -> set:
    """The --options of a script's add_argument calls, and of the sibling modules it imports."""
    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return set()
    seen.add(path)
    found = {"--help"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            found |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
                    [a.name for a in getattr(node, "names", [])]
            for name in names:
                found |= script_options(path.with_name(f"{name}.py"), seen)
    return found


def code_pieces(text: str) -> list:
    """Every command of fenced code blocks, and the inline code spans of the rest (a span may run over a line
    break, as Markdown allows, but not past a paragraph's end). In a block, a line ending in a backslash, or an
    indented line that opens with an option or a bracket (a usage synopsis: `sdpa attention --q Q.npy` then
    `               [--scale BETA]`), continues the command above it."""
    pieces, prose, fenced, joined = [], [], False, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, joined = not fenced, False
        elif fenced:
            continues = joined or (line[:1].isspace() and line.lstrip()[:1] in ("[", "-"))
            if continues and pieces:
                pieces[-1] += " " + line.strip()
            else:
                pieces.append(line)
            joined = line.rstrip().endswith("\\")
        else:
            prose.append(line)
    for paragraph in re.split(r"\n\s*\n", "\n".join(prose)):
        pieces += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", paragraph)]
    return pieces


def main() -> None:
    root, sdpa = pathlib.Path(sys.argv[1]), sys.argv[2]
    top = subcommands(help_text(sdpa, []))
    if len(top) < 2:
        sys.exit(f"FAIL: sdpa --help lists {top}: expected its subcommands")
    allowed = {}  # (sub,) or (sub, subsub) -> its options
    for sub in top:
        text = help_text(sdpa, [sub])
        allowed[(sub,)] = options(text)
        for inner in subcommands(text):
            allowed[(sub, inner)] = options(help_text(sdpa, [sub, inner])) | allowed[(sub,)]
    use = re.compile(r"(?:^|[\s/])sdpa\s+(" + "|".join(map(re.escape, top)) + r")\b(.*)")
    # Lower-case names only: bench/NAME.py in prose is a placeholder, not a script.
    script_use = re.compile(r"(?:^|[\s/])((?:bench|examples)/[a-z0-9_]+\.py)\b(.*)")
    scripts = {}  # path -> its options
    files = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    uses, unknown = 0, []
    for path in files:
        for piece in code_pieces(path.read_text(encoding="utf-8")):
            # Shell separators stand between spaces; a synopsis's a|b (no spaces) is a choice within one command.
            for command in re.split(r"\s(?:\|\||&&|\|)\s|;\s", piece):
                m = script_use.search(command)
                if m:  # a script: its argparse options
                    script, rest = m.groups()
                    if script not in scripts:
                        if not (root / script).is_file():
                            unknown.append(f"{path.relative_to(root)}: no file {script}: {command.strip()[:120]}")
                        scripts[script] = script_options(root / script)
                    what, defined = script, scripts[script]
                else:  # a subcommand (or a nested one): its --help's options
                    m = use.search(command)
                    if not m:
                        continue
                    sub, rest = m.groups()
                    key = (sub,)
                    inner = re.match(r"\s+([a-z][a-z0-9-]*)", rest)
                    if inner and (sub, inner.group(1)) in allowed:
                        key = (sub, inner.group(1))
                    what, defined = f"`sdpa {' '.join(key)}`", allowed[key]
                for flag in OPTION.findall(rest):
                    uses += 1
                    if flag not in defined:
                        unknown.append(f"{path.relative_to(root)}: {what} has no {flag}: {command.strip()[:120]}")
    if uses < 20:
        sys.exit(f"FAIL: only {uses} option uses found in {len(files)} files: the scan no longer reads the docs")
    for line in sorted(set(unknown)):
        print(f"FAIL: {line}")
    if unknown:
        sys.exit(1)
    print(f"ok: {uses} option uses of {len(top)} subcommands and {len(scripts)} scripts in {len(files)} files, "
          f"each one they define")


if __name__ == "__main__":
    main()
