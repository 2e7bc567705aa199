"""``tracking.json``: where in MLflow an experiment's runs are, and whether MLflow holds all of it.

The writer writes it when it opens the parent run, with ``holds_everything`` false, and
again with true once its last sync went through (the parent ended). So a driver killed
while MLflow still lacked records (during the search's final flush, say) leaves false: the
files are complete, MLflow is not, and ``tunekit resume`` of the finished search sends the
rest (``tunekit.driver.runner``). Readers: the CLI's and the HTML report's MLflow links,
``tunekit check``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tunekit.layout import TRACKING_FILE
from tunekit.storage.store import write_json


@dataclass(frozen=True)
class TrackingRecord:
    """Attributes:
    tracking_uri: where the runs are, credentials removed.
    experiment_name, experiment_id: the MLflow experiment.
    parent_run_id: the experiment's parent run.
    ui_url: the runs table in the MLflow UI, for a tracking server.
    holds_everything: MLflow took every record the writer was given, up to the parent's end.
    """

    tracking_uri: str
    experiment_name: str
    experiment_id: str
    parent_run_id: str
    ui_url: str | None = None
    holds_everything: bool = False

    def write(self, experiment_dir: Path) -> None:
        """Writes ``tracking.json`` whole (a reader never sees half of it). Raises OSError."""
        fields = {key: value for key, value in asdict(self).items() if value is not None}
        write_json(experiment_dir / TRACKING_FILE, fields, indent=2)

    def completed(self) -> TrackingRecord:
        return replace(self, holds_everything=True)

    @classmethod
    def read(cls, experiment_dir: Path) -> TrackingRecord | None:
        """The experiment's record; None when it has none (never tracked) or it is unreadable."""
        try:
            fields = json.loads((experiment_dir / TRACKING_FILE).read_text())
            return cls(
                tracking_uri=str(fields["tracking_uri"]),
                experiment_name=str(fields["experiment_name"]),
                experiment_id=str(fields["experiment_id"]),
                parent_run_id=str(fields["parent_run_id"]),
                ui_url=str(fields["ui_url"]) if fields.get("ui_url") else None,
                holds_everything=fields.get("holds_everything") is True,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
