"""dynajax raises PyTorch's exception type on PyTorch's own error inputs: every ``ErrorInput`` of the op_db
OpInfos dynajax has a callable for (tests/opinfo_support.py) that torch 2.13 raises on, one test each. The
message is not required to match torch's regex, but how often it does is measured and printed.

An error input dynajax does not raise torch's exception type on is listed in ``KNOWN_FAILURES`` with why;
its test is a strict xfail, so a fixed entry fails until it is removed from the table.
"""
import re

import pytest

from opinfo_support import OPINFOS, error_inputs, error_outcome, mapped, write_summary

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

HAVE = mapped()
CASES = {f"{key}/{k}": (key, ei) for key in sorted(HAVE) for k, ei in error_inputs(OPINFOS[key])}

_64 = "a tensor of more than 64 dims cannot be made (numpy's and XLA's limit), so the input itself fails"

# "OpInfo id/index of the error input in torch's list" -> why dynajax raises another exception type
KNOWN_FAILURES: dict[str, str] = {
}


class KnownFailure(Exception):
    """Raised when a KNOWN_FAILURES error input still does not raise torch's exception type."""


RESULTS: dict = {}   # case -> (same type, message matches too)


def _params():
    for case in CASES:
        why = KNOWN_FAILURES.get(case)
        marks = [pytest.mark.xfail(strict=True, raises=KnownFailure, reason=why)] if why else []
        yield pytest.param(case, id=case, marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_error_input(case):
    key, ei = CASES[case]
    same, regex, what = RESULTS[case] = error_outcome(HAVE[key], ei)
    if case in KNOWN_FAILURES:
        assert not same, f"listed in KNOWN_FAILURES but now raises torch's {ei.error_type.__name__}; remove it"
        raise KnownFailure(what)
    assert same, f"torch raises {ei.error_type.__name__} ({ei.error_regex!r}); dynajax: {what}"


def test_known_failures_name_error_inputs():
    stale = sorted(set(KNOWN_FAILURES) - set(CASES))
    assert not stale, f"KNOWN_FAILURES lists error inputs that are not collected: {stale}"


def test_parity_at_least_90_percent():
    assert len(CASES) >= 400
    assert len(KNOWN_FAILURES) <= 0.1 * len(CASES), \
        f"{len(KNOWN_FAILURES)} of {len(CASES)} error inputs raise another exception type than torch's"


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    if not RESULTS:
        return
    n = len(RESULTS)
    same = sum(r[0] for r in RESULTS.values())
    regex = sum(r[1] for r in RESULTS.values())
    line = (f"op_db error inputs: {same}/{n} raise torch's exception type ({100 * same / n:.1f}%), "
            f"{regex}/{n} also match its message regex ({100 * regex / n:.1f}%)")
    write_summary(request.config, [line])
