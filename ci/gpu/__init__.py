"""The GPU lane: vLLM on CUDA from an offline payload, its device-side scripts and its records (python -m ci.gpu)."""
