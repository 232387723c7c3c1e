"""Paths and tags shared by the declarations."""

from compat.layout import GENERATOR, WORKER  # noqa: F401  (re-exported for the declarations)
from compat.layout import SPECULATORS_CONFIG as CONFIG  # noqa: F401  (re-exported)

SPECULATORS = ">=0.3.0,<0.5"
V030, V04X = "0.3.0", "0.4.x"
TAG = "specdec-compat"
#: speculators' EAGLE model module, which ``import speculators`` loads (speculators/models/__init__.py)
EAGLE = "speculators/models/eagle.py"
