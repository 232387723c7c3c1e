"""The markers of the kit's own test suites, registered by tests/conftest.py.

They live with the tests, not in the installed kit: a user's pytest session in an environment with the kit installed
must not meet the markers (and the .ci/run hints) of this repository's suites.
"""

MARKERS = {
    "contract": "runs real vLLM on a tiny local model (needs a lane)",
    "proof": "leave-one-out proof of every needed patch (one engine start each)",
    "mla": "tiny Kimi-K2.5/DeepSeek-V3 (MLA + MoE) through the generator (minutes; not in -m contract)",
    "parallel": "the generator at TP=2 / PP=2 on CPU (minutes; not in -m contract)",
    "extract": "compat confirm --reference vllm-extract/none runs (extra engine starts; deselect with -m 'not extract')",
    "serve": "the modern path: a real `vllm serve` + speculators >= 0.5's client (not in -m contract; run with -m serve "
             "in a serve lane: python3 fixtures/lanes.py test --no-unit serve)",
    "user_install": "a user's own venv built as the README says, the serve path proven there (minutes; .ci/run runs "
                    "it: python -m pytest -m user_install tests/user)",
}
