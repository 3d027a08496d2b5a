"""Framework view of the contract: the very same classes as :mod:`agilerl.arena.models`.

``agilerl.models.PPOSpec is agilerl.arena.models.algorithms.PPOSpec``. Runtime
helpers that need torch (``init_buffer``, env factories) live in the
submodules and are imported on use, so this package stays as light as the
contract.
"""

from agilerl.arena.models import *  # noqa: F403
from agilerl.arena.models import __all__  # noqa: F401
