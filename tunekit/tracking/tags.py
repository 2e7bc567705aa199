"""MLflow tag names and other MLflow-side names tunekit writes and reads: one owner for all of them."""

from __future__ import annotations

# Tags tunekit sets; load_from_mlflow and resume look runs up by them.
TAG_ROLE = "tunekit.role"  # "experiment" on parent runs, "trial" on child runs


# tunekit.role's value on a retrain's run (tunekit.results.retrain): a child of the parent
# that is no trial; readers of the parent's children (check, load_from_mlflow) leave it out.
RETRAIN_ROLE = "retrain"
# On a retrain's run: the trial it retrained (never TAG_TRIAL_ID, which names a trial's own run),
# and the data it trained on ("train", "train+validation", "given").
TAG_RETRAIN_TRIAL_ID = "tunekit.retrain.trial_id"
TAG_RETRAIN_TRIAL_NUMBER = "tunekit.retrain.trial_number"
TAG_RETRAIN_DATA = "tunekit.retrain.data"
TAG_RETRAIN_FOLDER = "tunekit.retrain.folder"  # its folder in the experiment


TAG_EXPERIMENT_DIR = "tunekit.experiment_dir"


TAG_TRIAL_ID = "tunekit.ray_trial_id"


TAG_TRIAL_NUMBER = "tunekit.optuna_trial_number"


TAG_STATUS = "tunekit.status"  # completed | pruned | stopped | failed | running | lost


TAG_OUTCOME = "tunekit.outcome"  # the status in words: "pruned at rung 0 (epoch 1)"


TAG_REASON = "tunekit.reason"


TAG_RUNG = "tunekit.rung"


TAG_EPOCHS = "tunekit.epochs"
# On a trial's run that trained to its end: the epoch its model and final value come from
# (training.keep: the last, or the best); its metric's value at that step is the trial's.
TAG_KEPT_EPOCH = "tunekit.kept_epoch"


TAG_ATTEMPTS = "tunekit.attempts"


TAG_WALL_SECONDS = "tunekit.wall_seconds"  # on a trial's run: the seconds it ran (active time)


TAG_SESSIONS = "tunekit.sessions"  # on the parent: the search's sessions as JSON [[start, end], ...]


TAG_BEST_TRIAL = "tunekit.best_trial_id"
TAG_BEST_TRIAL_NUMBER = "tunekit.best_trial_number"  # its number, as in its run's name (trial-9)


NOTE_TAG = "mlflow.note.content"  # a run's description in MLflow's UI: the parent's names its best trial


# On a trial's run, with several objectives: its Pareto rank ("1" is the front) or why it
# has none ("infeasible", "pruned", ...), as the summary's front has it at the search's end.
TAG_PARETO_RANK = "tunekit.pareto_rank"


# On the parent run: "tunekit.budget.num_samples" and so on, the budget the search runs
# with now (its params keep the first run's; a grown search changes it).
TAG_BUDGET_PREFIX = "tunekit.budget."


# On a PBT trial's run: how many times it copied another trial, and each step in words
# ("tunekit.pbt_step.1": "epoch 4: copied trial 2 (epoch 4); learning_rate 0.001 -> 0.0012").
TAG_PBT_EXPLOITS = "tunekit.pbt_exploits"
TAG_PBT_STEP_PREFIX = "tunekit.pbt_step."


PARENT_RUN_TAG = "mlflow.parentRunId"


RUN_NAME_TAG = "mlflow.runName"  # setting it renames the run (tunekit.tracking.values.run_name)


# The experiment's kind, as MLflow 3's UI reads it (mlflow/server/js: ExperimentKind):
# "custom_model_development" is classic model training, shown as "Machine learning";
# without it the UI may take a tunekit experiment for a GenAI app.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"


EXPERIMENT_KIND = "custom_model_development"


# MLflow 3.17's UI opens an experiment on whichever side its GenAI / Model training
# switch is on (remembered by the browser, GenAI at first), whatever the kind tag says;
# this query parameter picks the Model training side for one link.
UI_WORKFLOW_QUERY = "workflowType=machine_learning"


# Trial info (from the trainable) recorded as tags, under these names.
INFO_TAGS = {  # trial info key -> child-run tag
    "device_names": "tunekit.device_names",
    "precision": "tunekit.precision",
    "replicas": "tunekit.replicas",
    "batch_size": "tunekit.global_batch_size",
    "jit_compile": "tunekit.jit_compile",
    "scaled_learning_rate": "tunekit.scaled_learning_rate",  # training.scale_lr: the rate trained with
    "space_read": "tunekit.space_read",  # the space names the trial read (tunekit.results.unread)
    "ray_gpu_ids": "tunekit.ray_gpu_ids",
    "node_ip": "tunekit.node_ip",
    "node_id": "tunekit.node_id",
    "cuda_version": "tunekit.env.cuda",
    "cudnn_version": "tunekit.env.cudnn",
}


MODEL_ARTIFACT_DIR = "model"
