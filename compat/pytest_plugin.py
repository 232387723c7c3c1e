"""pytest11 plugin: registers the ``contract`` marker wherever the kit is installed."""


def pytest_configure(config):
    config.addinivalue_line("markers", "contract: runs real vLLM on a tiny local model (needs a lane)")
