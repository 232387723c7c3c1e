"""Paths and tags shared by the declarations."""

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"
SPECULATORS = ">=0.3.0,<0.5"
V030, V04X = "0.3.0", "0.4.x"
TAG = "specdec-compat"
CONFIG = "speculators/config.py"
