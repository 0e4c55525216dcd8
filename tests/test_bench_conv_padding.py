"""bench/conv_padding.py (session 27's padding read in place against a padded copy): the conv
spec parser, one conv measured both ways with the same outputs, and the command line's table."""
from __future__ import annotations

import pytest

from bench_scripts import load


def test_conv_specs_parse_and_bad_ones_say_why():
    cp = load("conv_padding")
    assert cp.parse("3->32 k3 s2 p1 @224") == (3, 32, 3, 2, 1, 224)
    with pytest.raises(ValueError, match="I->O kK sS pP @HW"):
        cp.parse("3x32 k3 @224")
    mod, x = cp.spec_module("4->16 k3 s1 p1 @12")
    assert x.shape == (1, 4, 12, 12)


def test_one_conv_both_ways(capsys):
    cp = load("conv_padding")
    row = cp.measure("3->16 k3 s2 p1 @64", "llvm", rounds=1, threads=1)
    assert row["copy_us"] > 0 and row["inplace_us"] > 0 and row["max_diff"] <= 1e-5
    assert "padding in place" in row["schedule"], row["schedule"]
    assert cp.main(["--convs", "3->16 k3 s2 p1 @64", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 3->16 k3 s2 p1 @64 | llvm |" in out and "in place / copy" in out
