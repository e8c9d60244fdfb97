"""dynajax against PyTorch's own operator database (``op_db``), one test per OpInfo dynajax has a callable for
(tests/opinfo_support.py maps them by name when the tests are collected, so new ops are picked up as they
land): on torch's own sample inputs, forward values in float32, tape gradients in float64 against torch's,
and the tape against ``jax.vjp`` of the lowered graph.

An OpInfo whose checks disagree is either fixed or listed in ``KNOWN_FAILURES`` with the checks that fail
and why; its test is a strict xfail that passes only while exactly those checks still fail, so the table
cannot go stale (a fixed entry fails the test until it is removed). ``MISSING`` lists the OpInfos dynajax
has no callable for. ``python tests/opinfo_support.py`` prints the per-sample agreement.
"""
import pytest

from opinfo_support import OPINFOS, mapped, run_opinfo, write_summary

# torch's samples make both libraries warn as PyTorch does (deprecated defaults, degrees of freedom <= 0)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

HAVE = mapped()
MISSING = sorted(set(OPINFOS) - set(HAVE))   # OpInfos without a dynajax callable (the table shrinks as ops land)

KNOWN_FAILURES: dict[str, dict[str, str]] = {
    "linalg.pinv.singular": {"lowering": "jax.vjp of the pinv impl differs from the tape (which matches torch) "
                                         "on a rank-deficient matrix"},
    "as_strided_scatter": {"grad": "overlapping strides: torch's gradient of input differs from the index_put "
                                   "composition's"},
}


class KnownFailure(Exception):
    """Raised when an OpInfo fails exactly the checks KNOWN_FAILURES lists for it."""


def _params():
    for key in sorted(HAVE):
        known = KNOWN_FAILURES.get(key)
        marks = [pytest.mark.xfail(strict=True, raises=KnownFailure, reason="; ".join(
            f"{c}: {why}" for c, why in known.items()))] if known else []
        yield pytest.param(key, id=key, marks=marks)


RESULTS: dict = {}   # OpInfo id -> run_opinfo's result, for the summary at the end of the module


@pytest.mark.parametrize("key", list(_params()))
def test_opinfo(key):
    res = RESULTS[key] = run_opinfo(key, HAVE[key])
    failing = {check: next(f for f in r if f is not None) for check, r in res.items() if any(r)}
    known = KNOWN_FAILURES.get(key, {})
    unexpected = {c: f for c, f in failing.items() if c not in known}
    fixed = [c for c in known if c not in failing]
    assert not unexpected, "; ".join(f"{c}: {f}" for c, f in unexpected.items())
    assert not fixed, f"listed in KNOWN_FAILURES but now agrees with torch: {fixed}; remove it from the table"
    if known:
        raise KnownFailure("; ".join(f"{c}: {f}" for c, f in failing.items()))


def test_known_failures_name_mapped_opinfos():
    stale = sorted(k for k in KNOWN_FAILURES if k not in HAVE)
    assert not stale, f"KNOWN_FAILURES lists OpInfos dynajax has no callable for (or unknown ids): {stale}"
    bad = sorted(k for k, v in KNOWN_FAILURES.items() if not v or set(v) - {"forward", "grad", "lowering"})
    assert not bad, f"KNOWN_FAILURES entries must name the checks that fail: {bad}"


def test_coverage():
    """The mapping finds at least the callables it found when the table was written (ops only get added)."""
    assert len(HAVE) >= 629, f"only {len(HAVE)} of {len(OPINFOS)} OpInfos map to a dynajax callable"
    assert not set(HAVE) & set(MISSING)


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    if not RESULTS:
        return
    lines = [f"op_db: {len(HAVE)} / {len(OPINFOS)} OpInfos have a dynajax callable ({len(MISSING)} missing)"]
    for check in ("forward", "grad", "lowering"):
        runs = [f for r in RESULTS.values() for f in r[check]]
        ok = sum(f is None for f in runs)
        lines.append(f"  {check:8s} {ok}/{len(runs)} samples agree ({100 * ok / max(len(runs), 1):.1f}%)")
    write_summary(request.config, lines)
