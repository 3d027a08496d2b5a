"""Our warnings print as one ``warning: ...`` line on the command line (issue 33: a NeuralUCB
warning showed its file, line number and a stray source line)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import agilerl.trainer
from agilerl.logging.console import plain_warnings


def test_our_warnings_are_one_line_and_others_keep_their_location(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    plain_warnings()
    ours = warnings.formatwarning("no replay_buffer section", UserWarning,
                                  agilerl.trainer.__file__, 384, "  kwargs = ...")  # fmt: skip
    assert ours == "warning: no replay_buffer section\n"
    other = str(Path(pytest.__file__))
    theirs = warnings.formatwarning("deprecated", DeprecationWarning, other, 7, "x = 1")
    assert other in theirs and "DeprecationWarning" in theirs
