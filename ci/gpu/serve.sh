#!/bin/bash
# The modern (serve) path on the GPU: vLLM 0.20.0 (the payload) + speculators 0.9.0's own client, on the device.
# Runs in $T/src (this commit, unpacked from .gpu-lane/gpuserve/src.tgz: ci/gpu/serve_pack.sh) on the GPU machine after
# device.sh stage1, stage2 and part3 (the API server's imports, _moe_C,
# FlashMLA); results go to $OUT (at most 8 files come back a call: per pytest verb NAME.txt + junit_NAME.xml, per call
# one records.jsonl (a line per serve run) and one logs.tgz (every run's server and client logs so far).
#   bash ci/gpu/serve.sh prep                 # speculators 0.9.0 + hs-connectors + datasets into $T/spec09
#                                             # (wheels in .gpu-lane/gpuserve/spec09: carry .gpu-lane/gpuserve)
#   bash ci/gpu/serve.sh pytest NAME ARGS...  # pytest on the GPU modules (ci/gpu/test_h200_*.py), junit + records
#   bash ci/gpu/serve.sh confirm DTYPE        # `compat confirm --path serve` on the tiny Llama the tests built
#   bash ci/gpu/serve.sh model NAME MODEL DTYPE LAYERS [EXCLUDE...]  # apply, then confirm (GPU_SERVE_REFERENCE,
#                                             # GPU_SERVE_ARGS: space-separated `vllm serve` flags, --serve-arg each)
#   bash ci/gpu/serve.sh bench ARGS...        # benchmarks/serve_throughput.py ARGS -> $OUT/serve_throughput.txt
set -u
T=${GPU_LANE_TMP:-/tmp/gl}; OUT=${OUT:?set OUT}; mkdir -p "$T"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SPECDEC_COMPAT_CACHE=$T/cache SPECDEC_COMPAT_LANE=gpu-serve
WHEELS=${GPU_SERVE_WHEELS:?the folder of serve_pack.sh spec09 wheels}
step=${1:?prep | pytest NAME ARGS... | confirm DTYPE | bench ARGS...}
# the commit of the packed tree (serve_pack.sh writes src.commit beside spec09/): records and the benchmark say it
export GPU_SERVE_COMMIT=$(cat "$WHEELS/../src.commit" 2>/dev/null || echo unknown)

TP=""; [ -d "$T/torch/torch" ] && TP="$T/torch:"  # device.sh torch: vLLM >= 0.33's torch, first on the path
# nvidia-cutlass-dsl keeps `cutlass` in nvidia_cutlass_dsl/dsl_packages, which only its .pth puts on sys.path, and
# Python reads no .pth on PYTHONPATH: without this, vLLM 0.34.0's CUDA warm-up (kernel_warmup.py, every model)
# dies on "No module named 'cutlass'"
[ -d "$T/torch/nvidia_cutlass_dsl/dsl_packages" ] && TP="$TP$T/torch/nvidia_cutlass_dsl/dsl_packages:"

serve_env() {  # one speculators (0.9.0) on the path: the payload's 0.4.0.1 (payload/spec) is left off
  for d in "$T/payload/site/vllm" "$T/part3" "$T/spec09"; do
    [ -d "$d" ] || { echo "missing $d: run device.sh stage1, stage2 -, part3 - and serve.sh prep first"; exit 3; }
  done
  # payload/test (pytest, last): `device.sh dedupe` removes the image's own pytest, which the payload carries
  export PYTHONPATH=$TP$T/payload/site:$T/part3:$T/spec09:$PWD:$T/payload/test
  export GPU_SERVE_RECORDS=$OUT/records.jsonl
}

logs() {  # the servers' and clients' logs (no hidden-state files): <cache>/serve-runs/<lane>/<run>/
  [ -d "$T/cache/serve-runs" ] && (cd "$T/cache" && find serve-runs -name "*.log" -size -20M | tar -czf "$OUT/logs.tgz" -T -)
}

case $step in
prep)
  python3 -m pip install -q --no-deps --no-index --no-compile --target "$T/spec09" "$WHEELS"/*.whl || exit 4
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; python3 --version
    python3 -m pip list 2>/dev/null | grep -iE "^(torch|transformers|pyarrow|pandas|fsspec|huggingface.hub|xxhash|aiohttp|typer|rich|click|httpx|tqdm|psutil|protobuf) "
    ls "$T/spec09" | grep dist-info
    PYTHONPATH=$T/spec09 python3 -c "import datasets; print('datasets', datasets.__version__, 'imports')" 2>&1 | tail -2
  } > "$OUT/serve_machine.txt" 2>&1
  cat "$OUT/serve_machine.txt"
  ;;
pytest)
  name=${2:?NAME}; shift 2
  serve_env "$name"
  set -o pipefail
  timeout "${GPU_LANE_BUDGET_S:-540}" python3 -m pytest -p no:cacheprovider -o addopts= -o junit_logging=system-out \
      -rA --durations=10 --basetemp="$T/pt-$name" --junitxml="$OUT/junit_$name.xml" "$@" 2>&1 | tee "$OUT/$name.txt"
  echo "pytest rc=$?" | tee -a "$OUT/$name.txt"
  logs
  ;;
confirm)
  dtype=${2:?DTYPE}
  serve_env confirm
  model=$T/cache/models/serve-tiny-llama
  [ -f "$model/config.json" ] || python3 -c "import sys; from fixtures.tiny_model import build_tiny_llama; build_tiny_llama(sys.argv[1])" "$model"
  timeout "${GPU_LANE_BUDGET_S:-300}" python3 -m compat.cli confirm --path serve --model "$model" --dtype "$dtype" \
      --keep-work-dir --json-file "$OUT/confirm_serve_$dtype.json" > "$OUT/confirm_serve_$dtype.txt" 2>&1
  echo "compat confirm --path serve ($dtype): rc=$?" | tee -a "$OUT/confirm_serve_$dtype.txt"
  for log in "${TMPDIR:-/tmp}"/compat-serve-*/vllm-serve.log; do  # its server log (a temp work dir)
    [ -f "$log" ] && { echo "== $log (errors)"; grep -E "Error|Traceback|backend" "$log" | tail -20; } >> "$OUT/confirm_serve_$dtype.txt"
  done
  cat "$OUT/confirm_serve_$dtype.txt"
  ;;
model)  # model NAME MODEL DTYPE LAYERS [EXCLUDE...]: compat apply (excludes), then compat confirm --path serve
  name=${2:?NAME} model=${3:?MODEL} dtype=${4:?DTYPE} layers=${5:?LAYERS}; shift 5
  serve_env "$name"
  ex=(); for e in "$@"; do ex+=(--exclude "$e"); done
  sa=(); for a in ${GPU_SERVE_ARGS:-}; do sa+=("--serve-arg=$a"); done  # the server's own flags (confirm --serve-arg)
  { python3 -m compat.cli apply --revert --force; python3 -m compat.cli apply "${ex[@]}"; } > "$OUT/apply_$name.txt" 2>&1
  echo "compat apply ${ex[*]}: rc=$?"; tail -15 "$OUT/apply_$name.txt"
  # GPU_SERVE_REFERENCE: confirm's --reference (hf by default; self: no HF model)
  timeout "${GPU_LANE_BUDGET_S:-300}" python3 -m compat.cli confirm --path serve --model "$model" --dtype "$dtype" \
      --layers "$layers" --reference "${GPU_SERVE_REFERENCE:-hf}" "${sa[@]}" --keep-work-dir --json-file "$OUT/confirm_$name.json" > "$OUT/confirm_$name.txt" 2>&1
  echo "compat confirm --path serve ($name): rc=$?" | tee -a "$OUT/confirm_$name.txt"
  for log in "${TMPDIR:-/tmp}"/compat-serve-*/vllm-serve.log; do  # its server log (a temp work dir)
    [ -f "$log" ] && { echo "== $log"; grep -E "Error|Traceback|backend|Model Runner|model runner|MoE|Marlin|WNA16" "$log" | sort | uniq -c | sort -rn | head -25; } >> "$OUT/confirm_$name.txt"
    mv "$log" "$log.seen"
  done
  tail -40 "$OUT/confirm_$name.txt"
  ;;
llama-spread)  # llama-spread DIR: the tiny Llama with spread norms and an untied head (the self reference's fixture)
  serve_env build
  [ -f "${2:?DIR}/config.json" ] || python3 -c "import sys; from fixtures.tiny_model import build_tiny_llama
build_tiny_llama(sys.argv[1], max_positions=256, norm_spread=0.5)" "$2"
  ;;
selfcost)  # selfcost ARGS...: benchmarks/self_reference_cost.py --as-installed ARGS (P6 on this device)
  shift
  serve_env selfcost
  set -o pipefail
  timeout "${GPU_LANE_BUDGET_S:-540}" python3 benchmarks/self_reference_cost.py --as-installed --keep "$OUT/selfcost" "$@" \
      2>&1 | tee "$OUT/self_reference_cost_h200.txt"
  echo "selfcost rc=$?" | tee -a "$OUT/self_reference_cost_h200.txt"
  ;;
bench)
  shift
  serve_env bench
  set -o pipefail
  { date -u; echo "commit: $GPU_SERVE_COMMIT"; echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    echo "command: python3 benchmarks/serve_throughput.py $*"; } | tee "$OUT/serve_throughput.txt"
  timeout "${GPU_LANE_BUDGET_S:-540}" python3 benchmarks/serve_throughput.py "$@" 2>&1 | tee -a "$OUT/serve_throughput.txt"
  echo "bench rc=$?" | tee -a "$OUT/serve_throughput.txt"
  ;;
*) echo "unknown step $step"; exit 2 ;;
esac
