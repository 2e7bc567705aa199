"""Trial reasons and failure fingerprints, on real TensorFlow error texts (no TensorFlow imported).

The fixtures were captured once from real runs of a trainable whose ``build_data`` reads a
TFRecord file that is not there (``tests/trainables/missing_tfrecord.py``):

* ``tf_graph_error_first_trial.txt`` and ``tf_graph_error_later_trial.txt``: the
  ``error.txt`` of two trials of one search (the first on a fresh Ray worker, a later
  one on a reused worker), as ``tunekit.worker.trial`` writes it;
* ``tf_graph_error_ray_task.txt``: ``str()`` of the ``RayTaskError`` a Ray task running
  ``fit`` on that dataset raised, the form of Ray's ``Trial.error_msg``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tunekit.errors import FatalTrialError, TrialFailure, describe_error, failure_fingerprint, root_cause

FIXTURES = Path(__file__).parent / "fixtures"
FIRST_TRIAL = (FIXTURES / "tf_graph_error_first_trial.txt").read_text()
LATER_TRIAL = (FIXTURES / "tf_graph_error_later_trial.txt").read_text()
RAY_TASK = (FIXTURES / "tf_graph_error_ray_task.txt").read_text()
CAUSE = "NotFoundError: Graph execution error: data/train.tfrecord; No such file or directory"


def message_of(traceback: str) -> str:
    """The TensorFlow error's own message: what ``str(error)`` gave inside the trial."""
    return traceback.split("NotFoundError: ", 1)[1]


def test_a_graph_errors_reason_keeps_the_cause_and_drops_the_stack() -> None:
    # Before: "NotFoundError: Graph execution error: Detected at node IteratorGetNext defined at
    # (most recent call last): File ".../threading.py", line 1002, in _bootstrap File ..." cut
    # at 500 characters, 13 frames before the cause.
    assert describe_error(FIRST_TRIAL) == (
        f"{CAUSE} [[{{{{node IteratorGetNext}}}}]] [Op:__inference_multi_step_on_iterator_1339]"
    )
    assert describe_error(RAY_TASK) == (
        f"{CAUSE} [[{{{{node IteratorGetNext}}}}]] [Op:__inference_multi_step_on_iterator_514]"
    )


def test_the_reason_fits_whole_in_the_records_shorter_cut() -> None:
    # tunekit.driver.records cuts a worker's traceback at 300 characters; the cause used to be past 1,000.
    assert describe_error(LATER_TRIAL, limit=300) == (
        f"{CAUSE} [[{{{{node IteratorGetNext}}}}]] [Op:__inference_multi_step_on_iterator_2686]"
    )


def test_root_cause_removes_only_the_stack() -> None:
    assert root_cause(message_of(LATER_TRIAL)) == (
        "Graph execution error:\n\ndata/train.tfrecord; No such file or directory\n"
        "\t [[{{node IteratorGetNext}}]] [Op:__inference_multi_step_on_iterator_2686]\n"
    )
    plain = "Input 0 of layer 'dense' is incompatible: expected shape (None, 64), found (None, 63)"
    assert root_cause(plain) == plain


def test_the_stack_goes_also_when_it_shows_source_lines_and_ends_the_text() -> None:
    message = (
        "Graph execution error:\n\nDetected at node 'dense_1/MatMul' defined at (most recent call last):\n"
        '  File "/app/train.py", line 12, in <module>\n    model.fit(ds)\n'
        "Matrix size-incompatible: In[0]: [8,63], In[1]: [64,10]"
    )
    assert root_cause(message) == "Graph execution error:\n\nMatrix size-incompatible: In[0]: [8,63], In[1]: [64,10]"
    assert root_cause('Detected at node x defined at (most recent call last):\n  File "a.py", line 1, in f') == ""


def test_the_traceback_text_gives_its_last_exception_with_its_whole_message() -> None:
    chained = (
        "Traceback (most recent call last):\n"
        '  File "a.py", line 3, in f\n'
        "    g()\n"
        "KeyError: 'units'\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 5, in f\n'
        "    raise ValueError(text)\n"
        "ValueError: Exception encountered when calling Dense.call().\n\n"
        "  Input 0 is incompatible:\n  expected 8\n"
    )
    assert describe_error(chained) == (
        "ValueError: Exception encountered when calling Dense.call(). Input 0 is incompatible: expected 8"
    )
    assert describe_error("Traceback (most recent call last):\n  File x\nmypkg.errors.Broken\n") == "Broken"
    assert describe_error("worker died unexpectedly\n\n") == "worker died unexpectedly"
    assert describe_error(" \n") == ""


def test_tunekits_own_trial_errors_are_their_message_whole() -> None:
    assert describe_error(TrialFailure("non-finite loss at epoch 2")) == "non-finite loss at epoch 2"
    long = FatalTrialError("build_data must return two datasets;\n" + "x" * 600)
    assert describe_error(long) == "build_data must return two datasets; " + "x" * 600


def test_one_error_in_two_trials_has_one_fingerprint() -> None:
    # The traces differ in a Ray frame's line (44 on a fresh worker, 174 on a reused one)
    # and in the traced function's number (1339, 2686): before, the texts never matched.
    reasons = [describe_error(text) for text in (FIRST_TRIAL, LATER_TRIAL, RAY_TASK)]
    assert len(set(reasons)) == 3
    assert {failure_fingerprint(reason) for reason in reasons} == {
        f"{CAUSE} [[{{{{node IteratorGetNext}}}}]] [Op:__inference_multi_step_on_iterator_N]"
    }


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ('File "/app/model.py", line 12, in build', 'File "/app/model.py", line 140, in build'),
        ("at /app/model.py:12:5", "at /app/model.py:13:1"),
        ("<Dense object at 0x7f3a2c1d9e50>", "<Dense object at 0x7f11aa02b310>"),
        ("ray::ImplicitFunc.train() (pid=4242, ip=10.0.0.7)", "ray::ImplicitFunc.train() (pid=977, ip=10.0.0.9)"),
        ("cannot write /tmp/tmpa1b2_c3d/model.keras", "cannot write /tmp/tmpzz9x0y1q/model.keras"),
        ("no file /data/exp/ee5120d2/output.log", "no file /data/exp/3c6bec48/output.log"),
        (
            "{{node dense_3/MatMul}} [Op:__inference_one_step_on_data_1339]",
            "{{node dense_7/MatMul}} [Op:__inference_one_step_on_data_22]",
        ),
    ],
)
def test_what_differs_between_trials_of_one_error_is_normalised(first: str, second: str) -> None:
    assert failure_fingerprint(f"OSError: {first}") == failure_fingerprint(f"OSError: {second}")


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("NotFoundError: data/train.tfrecord; No such file", "NotFoundError: data/val.tfrecord; No such file"),
        (
            "ValueError: expected shape (None, 64), found (None, 63)",
            "ValueError: expected shape (None, 64), found (None, 8)",
        ),
        ("ResourceExhaustedError: OOM", "InternalError: OOM"),
        ("non-finite loss at epoch 1", "non-finite loss at epoch 2"),
    ],
)
def test_different_causes_keep_different_fingerprints(first: str, second: str) -> None:
    assert failure_fingerprint(first) != failure_fingerprint(second)


def test_cut_reasons_compare_on_their_start() -> None:
    # One error, a longer line number earlier on: the 500-character cut falls a word later.
    stack = " ".join(f'File "/app/m{i}.py", line {{}}, in f{i}' for i in range(20))
    first = describe_error(ValueError(stack.format(*range(20))))
    second = describe_error(ValueError(stack.format(*range(1000, 1020))))
    assert first.endswith("…") and second.endswith("…") and first[-30:] != second[-30:]
    assert failure_fingerprint(first) == failure_fingerprint(second)


def test_errors_import_no_heavy_library(imported_after: Callable[[str], list[str]]) -> None:
    assert imported_after("import tunekit.errors") == []


def test_keras_s_terminal_bold_does_not_reach_the_reason() -> None:
    error = TypeError(
        "Exception encountered when calling Net.call().\n\n"
        "\x1b[1m<tf.Tensor 'normalization/BroadcastTo:0' shape=(1, 64)> is out of scope\x1b[0m"
    )
    assert describe_error(error) == (
        "TypeError: Exception encountered when calling Net.call(). "
        "<tf.Tensor 'normalization/BroadcastTo:0' shape=(1, 64)> is out of scope"
    )
    traceback_text = (
        f'Traceback (most recent call last):\n  File "x.py", line 1, in f\n{error.__class__.__name__}: {error}'
    )
    assert describe_error(traceback_text) == describe_error(error)
