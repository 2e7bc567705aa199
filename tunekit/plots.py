"""``import tunekit.plots``: the figures of a finished experiment (``tunekit.results.plots``).

The same module under a shorter name, so ``import tunekit.plots``, ``from tunekit import plots``
and ``tunekit.plots`` after ``import tunekit`` all give one module. Imports matplotlib.
"""

import sys
from typing import TYPE_CHECKING

from tunekit.results import plots as _plots

if TYPE_CHECKING:  # what type checkers and editors see; at run time the module below is the one
    from tunekit.results.plots import (  # noqa: F401
        BEST_COLOR,
        STATUS_COLORS,
        FewTrialsWarning,
        all_figures,
        best_so_far,
        learning_curves,
        lineage,
        parallel_coordinates,
        param_importance,
        pareto,
    )

sys.modules[__name__] = _plots
