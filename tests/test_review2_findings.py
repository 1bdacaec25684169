"""Adversarial review of issue 15's shared vocabulary, converter and handle layout: each test here
failed before its fix."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybridge.cuda.signature import SignatureError, parse_signature
from pybridge.sizeexpr import SizeExprError, evaluate_size, parse_size


@settings(max_examples=20, deadline=None)
@given(digits=st.integers(min_value=4400, max_value=20000))
def test_huge_integer_literal_is_a_size_error_not_a_raw_valueerror(digits: int) -> None:
    # int() refuses more than 4300 digits (Python's str->int limit) with a message about
    # sys.set_int_max_str_digits; the user must get the size-expression error with a caret instead.
    text = "1" * digits
    with pytest.raises(SizeExprError, match="integer literal") as info:
        parse_size(text)
    assert info.value.pos == 0
    with pytest.raises(SignatureError, match="parameter 'x'.*integer literal"):
        parse_signature(f"k(float* x[n + {text}], int n)")


@pytest.mark.parametrize("bad", [3.5, None, b"n", ["n"]])
def test_evaluate_size_names_what_it_expected(bad: object) -> None:
    with pytest.raises(TypeError, match="size expression is a str or an int"):
        evaluate_size(bad, {"n": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [3.5, None, b"n"])
def test_parse_size_names_what_it_expected(bad: object) -> None:
    with pytest.raises(TypeError, match="size expression is a str, not"):
        parse_size(bad)  # type: ignore[arg-type]
