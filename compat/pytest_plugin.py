"""pytest11 plugin: registers the ``contract`` and ``proof`` markers wherever the kit is installed."""


def pytest_configure(config):
    config.addinivalue_line("markers", "contract: runs real vLLM on a tiny local model (needs a lane)")
    config.addinivalue_line("markers", "proof: leave-one-out proof of every needed patch (one engine start each)")
