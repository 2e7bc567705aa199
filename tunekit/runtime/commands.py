"""``tunekit up`` and ``tunekit down``: their arguments and handlers, for the command's parser.

Imported by ``tunekit.cli`` as it starts: stdlib only here, the rest when a handler runs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from tunekit.errors import SpecError


def add_runtime_commands(commands: Any) -> None:
    """Adds ``up`` and ``down`` to the command's subparsers (``argparse``'s ``add_subparsers`` result)."""
    up = commands.add_parser(
        "up",
        help="start the warm runtime: searches of later commands start in about a second",
        description="Starts a local runtime that outlives the command: Ray, and idle workers with TensorFlow "
        "imported. `tunekit run`, `resume` and `plan --probe` then run their searches on it (and say so), "
        "one at a time; `tunekit down` stops it, and so does an idle timeout.",
    )
    up.add_argument(
        "--workers",
        type=int,
        default=2 * (os.cpu_count() or 1),
        help="warm workers kept ready (default: twice the CPUs, so that a search right after another finds them)",
    )
    up.add_argument("--idle-timeout", type=float, default=60.0, help="minutes unused before it stops (default 60)")
    up.set_defaults(handler=_up)

    down = commands.add_parser("down", help="stop the warm runtime (tunekit up) and every process it started")
    down.set_defaults(handler=_down)


def _up(args: argparse.Namespace) -> int:
    from tunekit.runtime.client import up

    if args.workers < 1 or args.idle_timeout <= 0:
        raise SpecError(
            "tunekit up", "--workers and --idle-timeout must be > 0", f"{args.workers}, {args.idle_timeout}"
        )
    print(up(args.workers, args.idle_timeout * 60))
    return 0


def _down(args: argparse.Namespace) -> int:
    from tunekit.runtime.client import down

    print(down())
    return 0
