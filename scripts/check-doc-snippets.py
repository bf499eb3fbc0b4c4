#!/usr/bin/env python3
"""Compiles every Swift code block of the documentation, as written.

The blocks come from README.md, the DocC articles of every module (Sources/*/*.docc) and the documentation comments
of the sources (``/// ```swift``). Each block is compiled on its own (type-checked and lowered to SIL, so that
definite initialization and the like are checked too) against the modules of the debug build
(`swift build` first), in Swift 6 language mode.

A block that needs surroundings the page leaves out (the app's models, a variable it names, an enclosing class)
gets them from a hidden comment right above it, kept next to the docs:

    <!-- snippet
    uses: library                  (optional first line: preludes of this document to include)
    let rows: [(title: String, pages: Int)] = []
    -->

(A hidden line may not begin with `@` in its first column: DocC takes it for a directive, even in a comment.)
The comment's code goes before the block in `main.swift` (top-level code, so `try` and `await` work as in a
script); where it has a line `<snippet>`, the block goes there instead. A prelude is declared once per document:

    <!-- snippet-prelude library
    final class Book: Model { ... }
    -->

and is compiled in a file of its own beside `main.swift` (declarations only). The preludes of a module's DocC
articles serve that module's documentation comments too (the library's models, declared once). A first line `kind: manifest` compiles
the block as part of a package manifest against PackageDescription (the context wraps it with `<snippet>`).

Usage: scripts/check-doc-snippets.py [--list]   (exit 1 naming each block that does not compile)
"""

import concurrent.futures
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, ".build", "doc-snippets")
MODULES = os.path.join(ROOT, ".build", "debug", "Modules")
SWIFTC = shutil.which("swiftc") or "swiftc"
MANIFEST_API = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(SWIFTC))), "lib", "swift", "pm",
                            "ManifestAPI")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
# The preludes each module's DocC articles declare, by module and name.
MODULE_PRELUDES = {}


class Block:
    def __init__(self, source, line, module, code, directive, preludes):
        self.source, self.line, self.module = source, line, module
        self.code, self.directive, self.preludes = code, directive, preludes

    @property
    def name(self):
        return f"{os.path.relpath(self.source, ROOT)}:{self.line}"


def parse(lines, source, first_line, module):
    """The Swift blocks of one document (a list of (line number, text) pairs with any comment markers removed)."""
    blocks, preludes = [], {}
    directive = None  # the hidden comment right above the next fence: (kind, name, lines)
    i = 0
    while i < len(lines):
        number, text = lines[i]
        stripped = text.strip()
        if stripped.startswith("<!-- snippet"):
            head = stripped[len("<!-- "):]
            body = []
            i += 1
            while i < len(lines) and lines[i][1].strip() != "-->":
                body.append(lines[i][1])
                i += 1
            words = head.split()
            if words[0] == "snippet-prelude":
                preludes[words[1]] = body
            else:
                directive = body
            i += 1
            continue
        fence = FENCE.match(text)
        if fence:
            indent, language = fence.group(1), fence.group(2)
            code = []
            i += 1
            while i < len(lines) and not FENCE.match(lines[i][1]):
                line = lines[i][1]
                code.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
                i += 1
            if language == "swift":
                blocks.append(Block(source, number, module, code, directive or [], preludes))
            directive = None
            i += 1
            continue
        if stripped:
            directive = None
        i += 1
    return blocks, preludes


def module_of(path):
    parts = os.path.relpath(path, ROOT).split(os.sep)
    if parts[0] == "Sources":
        return parts[1]
    if parts[0] == "Tools" and parts[1] == "StoreInspectCore":
        return "StoreInspectCore"
    return None


def documents():
    """Every document with Swift blocks: README, the DocC articles, the documentation comments of the sources."""
    found = []
    readme = os.path.join(ROOT, "README.md")
    with open(readme, encoding="utf-8") as f:
        found += parse(list(enumerate(f.read().split("\n"), 1)), readme, 1, None)[0]
    for top in ("Sources", "Tools"):
        for directory, _, files in sorted(os.walk(os.path.join(ROOT, top))):
            for file in sorted(files):
                path = os.path.join(directory, file)
                module = module_of(path)
                if file.endswith(".md") and ".docc" in directory:
                    with open(path, encoding="utf-8") as f:
                        article, preludes = parse(list(enumerate(f.read().split("\n"), 1)), path, 1, module)
                    found += article
                    MODULE_PRELUDES.setdefault(module, {}).update(preludes)
                elif file.endswith(".swift"):
                    with open(path, encoding="utf-8") as f:
                        text = f.read().split("\n")
                    # Each run of documentation comment lines is one document.
                    run = []
                    for number, line in enumerate(text, 1):
                        stripped = line.strip()
                        if stripped.startswith("///"):
                            body = stripped[3:]
                            run.append((number, body[1:] if body.startswith(" ") else body))
                        elif run:
                            found += parse(run, path, run[0][0], module)[0]
                            run = []
    return found


def directive_options(directive):
    options, body = {}, list(directive)
    while body and re.match(r"^(uses|kind):", body[0].strip()):
        key, value = body.pop(0).strip().split(":", 1)
        options[key] = value.strip()
    return options, body


def compile_block(index, block):
    options, context = directive_options(block.directive)
    directory = os.path.join(BUILD, f"{index:03d}")
    os.makedirs(directory, exist_ok=True)
    if "<snippet>" in [line.strip() for line in context]:
        at = [line.strip() for line in context].index("<snippet>")
        body = context[:at] + block.code + context[at + 1:]
    else:
        body = context + block.code
    if options.get("kind") == "manifest":
        path = os.path.join(directory, "Package.swift")
        with open(path, "w", encoding="utf-8") as f:
            f.write("import PackageDescription\n" + "\n".join(body) + "\n")
        command = [SWIFTC, "-typecheck", "-swift-version", "6", "-I", MANIFEST_API,
                   "-package-description-version", "6.0", path]
    else:
        imports = ["import Foundation", "import EntityStore"]
        if block.module and block.module not in ("EntityStore", "CLMDB", "CLibPQ"):
            imports.append(f"import {block.module}")
        files = []
        uses = [name.strip() for name in options.get("uses", "").split(",") if name.strip()]
        if uses:
            prelude = os.path.join(directory, "prelude.swift")
            with open(prelude, "w", encoding="utf-8") as f:
                f.write("\n".join(imports) + "\n")
                for name in uses:
                    prelude_lines = block.preludes.get(name) or MODULE_PRELUDES.get(block.module, {}).get(name)
                    if prelude_lines is None:
                        return f"{block.name}: the snippet uses a prelude '{name}' that its document does not declare"
                    f.write("\n".join(prelude_lines) + "\n")
            files.append(prelude)
        main = os.path.join(directory, "main.swift")
        with open(main, "w", encoding="utf-8") as f:
            f.write("\n".join(imports) + "\n" + "\n".join(body) + "\n")
        files.append(main)
        command = [SWIFTC, "-emit-sil", "-wmo", "-o", os.devnull, "-swift-version", "6", "-module-name", "Snippet",
                   "-I", MODULES,
                   "-Xcc", "-fmodule-map-file=" + os.path.join(ROOT, "Sources", "CLMDB", "module.modulemap"),
                   "-Xcc", "-fmodule-map-file=" + os.path.join(ROOT, "Sources", "CLibPQ", "module.modulemap"),
                   "-Xcc", "-I/usr/include/postgresql"] + files
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        return f"{block.name}: does not compile (in {os.path.relpath(directory, ROOT)}):\n{result.stderr.strip()}"
    return None


def main():
    blocks = documents()
    if "--list" in sys.argv:
        for block in blocks:
            print(block.name)
        return 0
    if not os.path.isdir(MODULES):
        print("check-doc-snippets: no debug build in .build/debug; run `swift build` first", file=sys.stderr)
        return 1
    shutil.rmtree(BUILD, ignore_errors=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        failures = [f for f in pool.map(lambda pair: compile_block(*pair), enumerate(blocks)) if f]
    for failure in failures:
        print(failure + "\n", file=sys.stderr)
    print(f"documentation snippets: {len(blocks) - len(failures)} of {len(blocks)} compile")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
