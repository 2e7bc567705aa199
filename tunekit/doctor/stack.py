"""Python and the stack's versions, each against tunekit's own requirements."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

from tunekit.doctor.report import INSTALL_FIX, Check, ok, problem
from tunekit.environment import STACK, installed


def check_versions() -> list[Check]:
    """Python and the stack's versions, each against tunekit's own requirements."""
    requirements = _tunekit_requirements()
    checks = []
    python = platform.python_version()
    wanted = _requires_python()
    if wanted and not _satisfies(python, wanted):
        checks.append(
            problem(
                "python",
                f"{python}; tunekit needs Python {wanted}",
                f"use a Python {wanted} interpreter for the virtual environment",
            )
        )
    else:
        checks.append(ok("python", f"{python} ({sys.executable})"))
    for name in STACK:
        found = installed(name)
        if found is None:
            checks.append(problem(name, "not installed", INSTALL_FIX))
            continue
        distribution, version = found
        label = version if distribution == name else f"{version} ({distribution})"
        specifier = requirements.get(name.lower(), "")  # requirement names are lower-cased
        if specifier and not _satisfies(version, specifier):
            checks.append(problem(name, f"{label}; tunekit needs {name}{specifier}", INSTALL_FIX))
        else:
            checks.append(ok(name, label))
    return checks


# Packages whose mere presence slows every process that imports Ray, with what it costs and why.
SLOW_IMPORTS = {
    "rfc3987_syntax": (
        "rfc3987-syntax",
        "jsonschema imports it when present and builds 39 grammars (about 1.3 s); Ray imports jsonschema "
        "in the driver, its daemons and every trial worker (a local ray.init took 7.3 s instead of 3.7 s)",
    ),
}


def check_import_costs() -> list[Check]:
    """Packages installed beside Ray that make each of its processes start seconds later."""
    import importlib.util

    checks = []
    for module, (distribution, why) in SLOW_IMPORTS.items():
        if importlib.util.find_spec(module) is None:
            continue
        checks.append(
            problem(
                "ray start-up",
                f"{distribution} is installed: {why}",
                f"pip uninstall {distribution} (JupyterLab pulls it in; jsonschema then only skips the iri "
                "formats), or keep JupyterLab in another environment",
            )
        )
    return checks or [ok("ray start-up", "no package known to slow Ray's processes")]


def _tunekit_requirements() -> dict[str, str]:
    """tunekit's unconditional requirements, name -> specifier; empty when it is not installed."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - packaging ships with pip's environments
        return {}
    try:
        lines = importlib.metadata.requires("tunekit") or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    wanted: dict[str, str] = {}
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue  # a requirement pip could not install either; nothing to compare against
        if requirement.marker is None:
            wanted[requirement.name.lower()] = str(requirement.specifier)
    return wanted


def _requires_python() -> str:
    try:
        found = importlib.metadata.metadata("tunekit").get_all("Requires-Python") or [""]
    except importlib.metadata.PackageNotFoundError:
        return ""
    return str(found[0])


def _satisfies(version: str, specifier: str) -> bool:
    """Whether ``version`` meets ``specifier``; True when either cannot be parsed (not our call)."""
    try:
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.version import InvalidVersion
    except ImportError:  # pragma: no cover
        return True
    try:
        return SpecifierSet(specifier).contains(version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return True
