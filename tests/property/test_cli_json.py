"""`--json` output: the fast indenting of large answers writes exactly what json.dumps writes."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import fleet.cli.context as cli_context
from fleet.cli.context import indented_json
from tests.property.test_parsers import PROPERTY_SETTINGS

# JSON-like values as the CLI's answers hold them, plus what json's default=str turns into
# text (a path) and what only json writes (NaN, Infinity): every token kind and escape.
leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
          | st.builds(PurePosixPath, st.text(max_size=6)))
keys = st.text(max_size=6) | st.integers(-5, 5)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(keys, inner, max_size=4), max_leaves=30)


@PROPERTY_SETTINGS
@given(value=values)
def test_large_answers_are_indented_byte_for_byte_as_json_does(value: Any) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli_context, "FAST_INDENT_MIN_CHARS", 0)  # every answer counts as large
        assert indented_json(value) == json.dumps(value, indent=2, default=str)


def test_a_large_answer_takes_the_fast_path() -> None:
    # ~100 KB: over the threshold, so msgspec re-indents it (and the text is still json's)
    answer = {"hosts": [{"name": f"gpu{n:03d}", "gpus": [{"index": i, "util": 0.5 * i}
                                                         for i in range(8)]} for n in range(400)]}
    import msgspec

    compact = json.dumps(answer, separators=(",", ":"))
    assert len(compact) >= cli_context.FAST_INDENT_MIN_CHARS
    assert indented_json(answer) == msgspec.json.format(compact, indent=2) \
        == json.dumps(answer, indent=2)
