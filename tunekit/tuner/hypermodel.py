"""KerasTuner's ``HyperModel`` in tunekit: ``build(hp)``, and its own ``fit(hp, model, ...)``.

A ``build_model`` function becomes a ``HyperModel`` (``tuner.hypermodel.build(best_hps)``). A
HyperModel's own ``fit`` is called in place of ``model.fit`` in each trial (``route_fit``), and
while the space is found, on a model that does not train (``with_dry_fit``), so that its ``hp``
calls (a searched ``batch_size``) are part of the space.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tunekit.errors import SpecError
from tunekit.tuner.data import rebatched
from tunekit.tuner.hp import HyperParameters


class HyperModel:
    """KerasTuner's ``HyperModel``: ``build(hp)``, and ``fit(hp, model, *args, **kwargs)`` calling
    ``model.fit``. A ``build_model`` function passed to the ``Tuner`` becomes ``tuner.hypermodel``."""

    def __init__(self, build: Callable[[HyperParameters], Any] | None = None) -> None:
        if build is not None:
            self.build = build  # type: ignore[method-assign,assignment]

    def build(self, hp: HyperParameters) -> Any:
        raise NotImplementedError("a HyperModel subclass defines build(hp)")

    def fit(self, hp: HyperParameters, model: Any, *args: Any, **kwargs: Any) -> Any:
        return model.fit(*args, **kwargs)


def route_fit(model: Any, fit: Callable[..., Any], hp: HyperParameters) -> None:
    """``model.fit``, as the trial calls it, goes through the HyperModel's ``fit(hp, model, ...)``.

    The HyperModel's own ``model.fit(*args, **kwargs)`` then reaches Keras's ``fit`` with
    tunekit's arguments (its callbacks report every epoch); a ``batch_size`` it adds rebatches
    the datasets, as Keras would batch arrays.

    Raises:
        FatalTrialError: the HyperModel's fit never called ``model.fit`` (its own training loop).
    """
    import functools

    from tunekit.errors import FatalTrialError

    original = model.fit
    called: list[bool] = []

    def plain_fit(*args: Any, **kwargs: Any) -> Any:
        called.append(True)
        batch_size = kwargs.pop("batch_size", None)
        if batch_size is not None:
            args, kwargs = rebatched(args, kwargs, int(batch_size))
        return original(*args, **kwargs)

    @functools.wraps(original)  # its signature: the trial checks fit_options against it
    def routed(*args: Any, **kwargs: Any) -> Any:
        model.fit = plain_fit
        try:
            returned = fit(hp, model, *args, **kwargs)
        finally:
            model.fit = routed
        if not called:
            raise FatalTrialError(
                f"{getattr(fit, '__qualname__', 'fit')} returned without calling model.fit: tunekit reports each "
                "epoch from model.fit's callbacks, so a fit with a training loop of its own is not supported yet"
            )
        return returned

    model.fit = routed


def build_function(hypermodel: Any) -> Callable[[HyperParameters], Any]:
    build = getattr(hypermodel, "build", None)
    if build is None:
        if not callable(hypermodel):
            raise SpecError("hypermodel", "must be a build_model(hp) function or have a build(hp) method", hypermodel)
        return hypermodel
    return build


def fit_function(hypermodel: Any) -> Callable[..., Any] | None:
    """A HyperModel's own ``fit``; None when it has none (keras_tuner.HyperModel's only calls model.fit)."""
    owner = next((klass for klass in type(hypermodel).__mro__ if "fit" in vars(klass)), None)
    if owner is None or owner.__name__ == "HyperModel" or not hasattr(hypermodel, "build"):
        return None
    return hypermodel.fit


class DryModel:
    """The model as a HyperModel's fit sees it while the space is found: its ``fit`` trains nothing."""

    def __init__(self, model: Any) -> None:
        self._model = model

    def fit(self, *args: Any, **kwargs: Any) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def with_dry_fit(
    build: Callable[[HyperParameters], Any], fit: Callable[..., Any] | None, failures: list[str]
) -> Callable[[HyperParameters], Any]:
    """``build``, then a HyperModel's own fit on a model that does not train, so the ``hp`` calls in
    fit (a searched ``batch_size``) are part of the space too."""
    if fit is None:
        return build

    def build_and_fit(hp: HyperParameters) -> Any:
        model = build(hp)
        try:
            fit(hp, DryModel(model))
        except Exception as error:  # it needs the data: its hp calls after this point are not found
            note = (
                f"the HyperModel's fit failed without data ({type(error).__name__}: {error}); "
                "the hp calls after that point are not searched"
            )
            if note not in failures:
                failures.append(note)
        return model

    return build_and_fit
