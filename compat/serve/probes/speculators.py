"""Probes of speculators' serve-path client (S18): what each release's data-generation client does.

The release is read from the distribution's metadata, never from
``speculators/version.py`` (0.5.0-0.7.0.x ship a version.py one release
behind).  The launch script that forces ``--no-enable-chunked-prefill``
(0.6.0-0.7.0.x) lives in the repository, not in the wheel: from a wheel that
probe says ``not-shipped``, from a checkout it reads the script.
"""

from __future__ import annotations

import ast
import email.parser

from packaging.version import InvalidVersion, Version

from compat import astkit
from compat.astkit import Reader
from compat.probes.base import Reading, Unknown, matching, missing_file, nowhere_in
from .connector import serve_probe

CLIENT = "speculators/data_generation/vllm_client.py"
OFFLINE = "speculators/data_generation/offline.py"
VERSION_PY = "speculators/version.py"
VENDORED = "speculators/_vendor/hs_connectors/__init__.py"
LAUNCH = "scripts/launch_vllm.py"
PACKAGE = "speculators/__init__.py"


def _client(reader: Reader):
    """The client module's tree, or a Reading('absent') for a speculators without one, or Unknown."""
    tree = reader.module(CLIENT)
    if tree is not None:
        return tree
    try:  # the serve client came with 0.5.0: missing from a later (or unversioned) release, it moved
        serve = Version(reader.source.version) >= Version("0.5.0")
    except (InvalidVersion, TypeError):
        return Unknown(f"{CLIENT} not found and the release's version is not read: moved or never there?")
    return Unknown(f"{CLIENT} not found in speculators {reader.source.version} (moved or renamed?)") if serve \
        else missing_file(reader, CLIENT, PACKAGE, "a speculators source")


def _flocks(fn: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and astkit.dotted_name(n.func) in ("fcntl.flock", "flock") for n in ast.walk(fn))


@serve_probe("serve.speculators.lock_wait", package="speculators", values=("absent", "no", "yes"))
def speculators_lock_wait(reader: Reader):
    """The client waits on <file>.lock before reading: absent (no serve client) / no (0.5.0) / yes (0.6.0+)."""
    tree = _client(reader)
    if not isinstance(tree, ast.Module):
        return tree
    waits = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _flocks(n)]
    if waits:
        return Reading("yes", CLIENT, waits[0].lineno)
    if "lock" in (reader.text(CLIENT) or "").lower():
        return Unknown(f"{CLIENT} mentions a lock but takes no flock")
    return Reading("no", CLIENT, None)


@serve_probe("serve.speculators.handle", package="speculators", values=("absent", "no", "yes"))
def speculators_handle(reader: Reader):
    """The client accepts kv_transfer_params["handle"] (Mooncake): absent / no (<= 0.7.0.x) / yes (0.8.0+)."""
    tree = _client(reader)
    if not isinstance(tree, ast.Module):
        return tree
    fn = astkit.find_function(tree, "extract_output")
    if fn is None:
        return Unknown(f"extract_output not found in {CLIENT}")
    gets = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get"]
    if any(not (g.args and isinstance(g.args[0], ast.Constant)) for g in gets):
        return Unknown("extract_output reads kv_transfer_params with a computed key")
    keys = {g.args[0].value for g in gets}
    if "hidden_states_path" not in keys:
        return Unknown("extract_output reads no hidden_states_path")
    return Reading("yes" if "handle" in keys else "no", CLIENT, fn.lineno)


@serve_probe("serve.speculators.version_py", package="speculators", values=("agrees", "lags"))
def speculators_version_py(reader: Reader):
    """speculators/version.py against the dist metadata: agrees (0.8.0+) / lags (0.5.0-0.7.0.x say the release before)."""
    released = reader.source.version
    if not released:
        return Unknown("the distribution's metadata version is not known")
    tree = reader.module(VERSION_PY)
    if tree is None:
        return Unknown(f"{VERSION_PY} not found")
    node = astkit.defines(tree, "version")
    try:
        written = astkit.literal(node.value) if isinstance(node, ast.Assign) else None
    except astkit.NotLiteral:
        written = None
    if not isinstance(written, str):
        return Unknown(f"{VERSION_PY} has no literal version")
    return Reading("agrees" if written == released else "lags", VERSION_PY, node.lineno)


#: the rest of the Requires-Dist head after the name (no spaces): a version specifier such as ``==0.8.1``
@serve_probe("serve.speculators.hs_connectors", package="speculators",
             values=matching("a requirement's specifier, e.g. ==0.8.1", r"\S+", ("none", "vendored", "any")))
def speculators_hs_connectors(reader: Reader):
    """hs-connectors the release uses: none (<= 0.6) / vendored (0.7.0.x, file backend only) / ==X (0.8.0+ pin)."""
    if reader.module(VENDORED) is not None:
        return Reading("vendored", VENDORED, None)
    name, version = reader.source.dist_name, reader.source.version
    if not (name and version):
        return Unknown("the distribution's metadata is not known")
    relpath = f"{name.replace('-', '_')}-{version}.dist-info/METADATA"
    text = reader.text(relpath)
    if text is None and reader.source.metadata:  # an sdist's PKG-INFO (or a tree's): the same core metadata
        relpath, text = "PKG-INFO", reader.source.metadata
    if text is None:
        return Unknown(f"{relpath} not readable")
    for line in email.parser.Parser().parsestr(text, headersonly=True).get_all("Requires-Dist") or []:
        head = line.split(";", 1)[0].replace(" ", "")
        if head.lower().startswith(("hs-connectors", "hs_connectors")):
            return Reading(head[len("hs-connectors"):] or "any", relpath, None)
    return Reading("none", relpath, None)


@serve_probe("serve.speculators.check_hidden_states", package="speculators",
             values=("absent", "no-aminmax", "aminmax-raw"))
def speculators_check_hidden_states(reader: Reader):
    """--validate-outputs' check_hidden_states: absent / no-aminmax / aminmax-raw (0.9.0: fails on float8 files)."""
    tree = reader.module(OFFLINE)
    if tree is None:
        client = _client(reader)
        return client if not isinstance(client, ast.Module) else nowhere_in(reader, "speculators/", "check_hidden_states")
    fn = astkit.find_function(tree, "check_hidden_states")
    if fn is None:
        return Reading("absent", OFFLINE, None)
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and astkit.dotted_name(n.func) == "torch.aminmax"]
    if not calls:
        return Reading("no-aminmax", OFFLINE, fn.lineno)
    if all(isinstance(c.args[0], ast.Name) for c in calls if c.args):
        return Reading("aminmax-raw", OFFLINE, calls[0].lineno)
    return Unknown("torch.aminmax on an expression not seen in a release")


@serve_probe("serve.speculators.launch_chunked_prefill", package="speculators",
             values=("not-shipped", "forces-off", "leaves"))
def speculators_launch_chunked_prefill(reader: Reader):
    """scripts/launch_vllm.py and chunked prefill: not-shipped (a wheel) / forces-off (0.6.0-0.7.0.x) / leaves."""
    text = reader.text(LAUNCH)
    if text is None:
        return missing_file(reader, LAUNCH, PACKAGE, "a speculators source", "not-shipped")
    if "--no-enable-chunked-prefill" in text:
        return Reading("forces-off", LAUNCH, None)
    if "chunked" in text:
        return Unknown(f"{LAUNCH} mentions chunked prefill in a way not seen")
    return Reading("leaves", LAUNCH, None)
