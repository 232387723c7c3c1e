"""pytest11 plugin: registers the ``contract`` and ``proof`` markers wherever the kit is installed."""

from compat.layout import MARKERS


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
