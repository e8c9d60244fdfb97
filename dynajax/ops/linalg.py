"""Products: ``matmul`` (with PyTorch's 1-D / 2-D / batched broadcasting), ``mm``, ``bmm``,
``mv``, ``dot``, ``outer``, ``addmm``/``addmv``/``baddbmm``, ``einsum``, ``tensordot``, ``kron``
(``torch.linalg``'s factorizations and norms are in ``decomp``).

Every product runs through one of two ops, ``matmul`` and ``einsum``; the
public functions only check their arguments the way PyTorch does (its error
for mismatched shapes or dtypes comes from the kernel PyTorch would call:
mm, mv, dot or bmm) and reshape.
"""
from __future__ import annotations

import math
import string

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .autocast import cast_inputs
from .._tensor import Tensor, _wrap_dim, method
from .creation import as_tensor, eye, ones
from .elementwise import broadcast_error, export, where, with_out
from .reduce import sum
from .registry import apply, op
from .shape import expand, reshape, transpose

__all__ = ["matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "addr",
           "baddbmm", "addbmm", "einsum", "tensordot", "kron", "chain_matmul"]

_HIGHEST = jax.lax.Precision.HIGHEST


def _shape(x: Tensor) -> tuple:
    return tuple(x._v.shape)


_C_NAMES = _dtype.C_NAMES   # dtype names in PyTorch's messages


def _same_dtype_mm(a: Tensor, b: Tensor) -> None:
    if a._v.dtype != b._v.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_C_NAMES[a.dtype.name]} != "
                           f"{_C_NAMES[b.dtype.name]}")


def _same_dtype_bmm(*xs: Tensor) -> None:
    for x in xs[1:]:
        if x._v.dtype != xs[0]._v.dtype:
            raise RuntimeError(f"expected scalar type {xs[0].dtype.legacy_name} but found {x.dtype.legacy_name}")


def _mat(shape: tuple) -> str:
    return "x".join(map(str, shape))


# ---------------------------------------------------------------- argument checks (PyTorch's kernels)
def _check_mm(a: tuple, b: tuple, ta: Tensor, tb: Tensor) -> None:
    """mm's checks on (possibly folded) shapes ``a`` and ``b``."""
    if a[1] != b[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_mat(a)} and {_mat(b)})")
    _same_dtype_mm(ta, tb)


def _check_mv(a: tuple, b: tuple, ta: Tensor, tb: Tensor) -> None:
    if a[1] != b[0]:
        raise RuntimeError(f"size mismatch, got input ({a[0]}), mat ({_mat(a)}), vec ({b[0]})")
    if ta._v.dtype != tb._v.dtype:
        res = _dtype.from_np(_dtype.promote_types(ta._v.dtype, tb._v.dtype)).legacy_name
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {res}, "
                           f"{ta.dtype.legacy_name}, and {tb.dtype.legacy_name}")


def _check_dot(a: Tensor, b: Tensor) -> None:
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    if a._v.dtype != b._v.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {a.dtype.legacy_name} "
                           f"and {b.dtype.legacy_name}")
    n, m = a._v.shape[0], b._v.shape[0]
    if n != m:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the same "
                           f"number of elements, but got {n} and {m} elements respectively")


def batch_shape(batch_a: tuple, batch_b: tuple) -> tuple:
    """The broadcast of two batch shapes, or PyTorch's broadcasting error over them."""
    try:
        return tuple(np.broadcast_shapes(tuple(batch_a), tuple(batch_b)))
    except ValueError:
        broadcast_error(None, Tensor._make(np.empty(batch_a, bool)), Tensor._make(np.empty(batch_b, bool)))
        raise


def _check_batched(a: tuple, b: tuple, ta: Tensor, tb: Tensor) -> None:
    """matmul's broadcasting bmm path: ``a`` is (..., n, k), ``b`` is (..., k, m)."""
    batch = batch_shape(a[:-2], b[:-2])
    if a[-1] != b[-2]:
        nb = math.prod(batch)
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{nb}, {a[-1]}] but "
                           f"got: [{nb}, {b[-2]}].")
    _same_dtype_bmm(ta, tb)


def _check_matmul(x: Tensor, y: Tensor) -> None:
    """The checks (and messages) of the kernel ``torch.matmul`` dispatches to for these ranks."""
    a, b = _shape(x), _shape(y)
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {na}D and {nb}D")
    if na == 1 and nb == 1:
        _check_dot(x, y)
    elif nb == 1:  # matrix (or folded batch of matrices) @ vector
        _check_mv((math.prod(a[:-1]), a[-1]), b, x, y)
    elif na == 1 and nb == 2:
        _check_mm((1, a[0]), b, x, y)
    elif nb == 2:  # (..., n, k) @ (k, m): PyTorch folds the batch into mm
        _check_mm((math.prod(a[:-1]), a[-1]), b, x, y)
    else:
        _check_batched(a if na > 1 else (1,) + a, b, x, y)


# ---------------------------------------------------------------- the matmul op
@op("matmul")
def _matmul(a, b, *, nd):
    if a.dtype in (jnp.float16, jnp.bfloat16):  # accumulate in float32, as PyTorch does on CPU
        return jnp.matmul(a, b, precision=_HIGHEST, preferred_element_type=jnp.float32).astype(a.dtype)
    return jnp.matmul(a, b, precision=_HIGHEST)


def _as_matrices(g: Tensor, nd: tuple) -> Tensor:
    """The cotangent with the dims a vector operand dropped put back (vectors as row / column matrices)."""
    na, nb = nd
    gs = _shape(g)
    if na == 1:
        return reshape(g, gs[:-1] + (1, gs[-1]) if nb > 1 else (1, 1))
    return reshape(g, gs + (1,)) if nb == 1 else g


def _matmul_vjp_a(g, out, a, b, *, nd):
    na, nb = nd
    if na == 1 and nb == 1:   # (conjugates: PyTorch's complex convention, see ops/complex.py)
        return g * b.conj()
    ga = _mm_raw(_as_matrices(g, nd), transpose(reshape(b, _shape(b) + (1,)) if nb == 1 else b, -1, -2).conj())
    return reshape(ga, _shape(ga)[:-2] + _shape(ga)[-1:]) if na == 1 else ga  # engine sums batch dims


def _matmul_vjp_b(g, out, a, b, *, nd):
    na, nb = nd
    if na == 1 and nb == 1:
        return g * a.conj()
    gb = _mm_raw(transpose(reshape(a, (1,) + _shape(a)) if na == 1 else a, -1, -2).conj(), _as_matrices(g, nd))
    return reshape(gb, _shape(gb)[:-1]) if nb == 1 else gb


_matmul.defvjp(_matmul_vjp_a, _matmul_vjp_b)


def _mm_raw(a: Tensor, b: Tensor) -> Tensor:
    return apply(_matmul, a, b, nd=(a.ndim, b.ndim))


@method()
@cast_inputs("low")
def matmul(input: Tensor, other: Tensor, *, out=None) -> Tensor:
    """Matrix product with PyTorch's rules: dot, mv, mm, or a batched product broadcasting batch dims.

    >>> dynajax.matmul(dynajax.ones(5, 2, 3), dynajax.ones(3, 4)).shape
    dynajax.Size([5, 2, 4])
    """
    _check_matmul(input, other)
    return with_out(_mm_raw(input, other), out)


Tensor.__matmul__ = matmul
Tensor.__rmatmul__ = lambda self, other: matmul(as_tensor(other), self)


@method()
@cast_inputs("low")
def mm(input: Tensor, mat2: Tensor, *, out=None) -> Tensor:
    """Product of two matrices (no broadcasting)."""
    if input.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    _check_mm(_shape(input), _shape(mat2), input, mat2)
    return with_out(_mm_raw(input, mat2), out)


@method()
@cast_inputs("low")
def bmm(input: Tensor, mat2: Tensor, *, out=None) -> Tensor:
    """Batched product of ``(b, n, k)`` and ``(b, k, m)`` tensors (no broadcasting)."""
    for name, x in (("batch1", input), ("batch2", mat2)):
        if x.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    (b, n, k), (b2, k2, m) = _shape(input), _shape(mat2)
    if (b2, k2) != (b, k):
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{b}, {k}] but got: "
                           f"[{b2}, {k2}].")
    _same_dtype_bmm(input, mat2)
    return with_out(_mm_raw(input, mat2), out)


@method()
@cast_inputs("low")
def mv(input: Tensor, vec: Tensor, *, out=None) -> Tensor:
    """Matrix-vector product."""
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {input.ndim}, {vec.ndim}")
    _check_mv(_shape(input), _shape(vec), input, vec)
    return with_out(_mm_raw(input, vec), out)


@method()
def dot(input: Tensor, tensor: Tensor, *, out=None) -> Tensor:
    """Inner product of two 1-D tensors of the same dtype."""
    _check_dot(input, tensor)
    return with_out(_mm_raw(input, tensor), out)


@method()
def vdot(input: Tensor, other: Tensor, *, out=None) -> Tensor:
    """``dot`` with the first argument conjugated."""
    return dot(input.conj() if input.is_complex() else input, other, out=out)


@method()
def inner(input: Tensor, other: Tensor, *, out=None) -> Tensor:
    """Sum-product over the last dims (scalars multiply)."""
    if input.ndim == 0 or other.ndim == 0:
        return with_out(input * other, out)
    return with_out(tensordot(input, other, ([-1], [-1])), out)


@method()
def outer(input: Tensor, vec2: Tensor, *, out=None) -> Tensor:
    """Outer product of two 1-D tensors (with type promotion)."""
    for name, x in (("self", input), ("vec2", vec2)):
        if x.ndim != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {x.ndim}-D")
    return with_out(reshape(input, (-1, 1)) * vec2, out)


ger = outer
method("ger")(outer)


# ---------------------------------------------------------------- fused add + product
def _scaled_add(input: Tensor, prod: Tensor, beta, alpha) -> Tensor:
    """``beta * input + alpha * prod``; ``input`` is ignored (even NaN) when ``beta == 0``."""
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:  # PyTorch still gives ``input`` a (zero) gradient
        return prod + where(False, input, 0.0) if input.requires_grad else prod
    input = expand(input, _shape(prod))
    return prod + (input if beta == 1 else input * beta)


def _fused_add(name: str, product, what: str):
    """Declare ``name(input, a, b, *, beta=1, alpha=1)``: ``beta * input + alpha * product(a, b)``,
    its Tensor method and its in-place twin ``name_``."""
    @cast_inputs("low")
    def fused(input: Tensor, a: Tensor, b: Tensor, *, beta=1, alpha=1, out=None) -> Tensor:
        return with_out(_scaled_add(input, product(a, b), beta, alpha), out)
    fused.__name__ = fused.__qualname__ = name
    fused.__doc__ = f"``beta * input + alpha * {what}``."
    return export(fused, inplace_name=name + "_")


addmm = _fused_add("addmm", mm, "(mat1 @ mat2)")
addmv = _fused_add("addmv", mv, "(mat @ vec)")
addr = _fused_add("addr", outer, "outer(vec1, vec2)")
baddbmm = _fused_add("baddbmm", bmm, "bmm(batch1, batch2)")
addbmm = _fused_add("addbmm", lambda a, b: sum(bmm(a, b), 0), "bmm(batch1, batch2).sum(0)")


def chain_matmul(*matrices: Tensor) -> Tensor:
    """``matrices[0] @ matrices[1] @ ...`` (each 2-D)."""
    r = matrices[0]
    for m in matrices[1:]:
        r = mm(r, m)
    return r


def multi_dot(tensors) -> Tensor:
    """``torch.linalg.multi_dot``: the product of a list of matrices; the first and last may be 1-D."""
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    r = tensors[0]
    for m in tensors[1:]:
        r = matmul(r, m)
    return r


# ---------------------------------------------------------------- einsum
_LETTERS = string.ascii_uppercase + string.ascii_lowercase  # sublist ints 0..51 map to these


@op("einsum")
def _einsum(*xs, equation, sizes):
    return jnp.einsum(equation, *xs, precision=_HIGHEST)


@_einsum.defvjp
def _einsum_vjp(g, out, *xs, equation, sizes):
    ins, outs = equation.split("->")
    subs = ins.split(",")
    size = dict(sizes)
    grads = []
    for i, sub in enumerate(subs):
        if not xs[i].requires_grad:
            grads.append(None)
            continue
        terms, args = [outs], [g]
        for j, other in enumerate(subs):
            if j != i:
                terms.append(other)
                args.append(xs[j])
        have = set("".join(terms))
        target, seen = [], set()
        for c in sub:
            if c in seen:  # a repeated subscript (diagonal): write through an identity matrix
                fresh = next(ch for ch in _LETTERS if ch not in have and ch not in equation)
                have.add(fresh)
                terms.append(c + fresh)
                args.append(eye(size[c], dtype=g.dtype))
                target.append(fresh)
                continue
            seen.add(c)
            if c not in have:  # summed only inside this operand: its gradient is broadcast
                terms.append(c)
                args.append(ones(size[c], dtype=g.dtype))
                have.add(c)
            target.append(c)
        eq = ",".join(terms) + "->" + "".join(target)
        grads.append(apply(_einsum, *args, equation=eq, sizes=sizes))
    return tuple(grads)


def _sublist_equation(args) -> tuple:
    """``einsum(op0, [0, 1], op1, [1, 2], [0, 2])`` as ``("AB,BC->AC", [op0, op1])``."""
    def term(sub):
        return "".join("..." if s is Ellipsis else _LETTERS[s] for s in sub)
    ops, terms = list(args[0:len(args) - len(args) % 2:2]), [term(s) for s in args[1::2]]
    eq = ",".join(terms[:len(ops)])
    if len(args) % 2:
        eq += "->" + term(args[-1])
    return eq, ops


def _parse_einsum(equation: str, operands) -> tuple:
    """Check ``equation`` as PyTorch does; return it without ellipses or implicit output, and letter sizes."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) > len(operands):
        raise RuntimeError("einsum(): fewer operands were provided than specified in the equation")
    if len(terms) < len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation")
    for pos, c in enumerate(eq):
        if c not in _LETTERS and c not in ".,->":
            raise RuntimeError(f"einsum(): invalid subscript given at index {pos} in the equation string, "
                               "subscripts must be in [a-zA-Z]")
    ell_nd = 0
    for i, (t, x) in enumerate(zip(terms, operands)):
        n = len(t.replace("...", ""))
        if "..." in t:
            if n > x.ndim:
                raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n}) is more than the "
                                   f"number of dimensions ({x.ndim}) for operand {i}")
            ell_nd = max(ell_nd, x.ndim - n)
        elif n != x.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({n}) does not match the "
                               f"number of dimensions ({x.ndim}) for operand {i} and no ellipsis was given")
    ell = "".join([c for c in _LETTERS if c not in eq][:ell_nd])
    expanded, size = [], {}
    for i, (t, x) in enumerate(zip(terms, operands)):
        if "..." in t:
            t = t.replace("...", ell[ell_nd - (x.ndim - len(t) + 3):])
        expanded.append(t)
        mine = {}
        for c, s in zip(t, _shape(x)):
            if c in mine and mine[c] != s:
                raise RuntimeError(f"einsum(): subscript {c} is repeated for operand {i} but the sizes don't "
                                   f"match, {s} != {mine[c]}")
            mine[c] = s
            prev = size.get(c, 1)
            if s != prev and s != 1 and prev != 1:
                raise RuntimeError(f"einsum(): subscript {c} has size {s} for operand {i} which does not "
                                   f"broadcast with previously seen size {prev}")
            size[c] = max(s, prev)
    if arrow:
        out = rhs.replace("...", ell)
        for c in rhs.replace("...", ""):
            if c not in size:
                raise RuntimeError(f"einsum(): output subscript {c} does not appear in the equation for any input "
                                   "operand")
            if rhs.count(c) > 1:
                raise RuntimeError(f"einsum(): output subscript {c} appears more than once in the output")
    else:
        counts = "".join(t.replace("...", "") for t in terms)
        out = ell + "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    return ",".join(expanded) + "->" + out, tuple(sorted(size.items()))


@cast_inputs("low")
def einsum(*args) -> Tensor:
    """Einstein summation, as ``torch.einsum`` (equation and operands, operand list, or sublist form).

    >>> dynajax.einsum("ij,jk->ik", dynajax.ones(2, 3), dynajax.ones(3, 4)).shape
    dynajax.Size([2, 4])
    """
    if isinstance(args[0], str):
        equation, operands = args[0], list(args[1:])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = list(operands[0])
    else:
        equation, operands = _sublist_equation(args)
    equation, sizes = _parse_einsum(equation, operands)
    _same_dtype_bmm(*operands)
    return apply(_einsum, *operands, equation=equation, sizes=sizes)


def tensordot(a: Tensor, b: Tensor, dims=2, out=None) -> Tensor:
    """Sum-product of ``a``'s dims ``dims[0]`` with ``b``'s dims ``dims[1]`` (or the last/first ``dims``)."""
    if isinstance(dims, int) or (isinstance(dims, Tensor) and dims.ndim == 0):
        n = int(dims)
        if n < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={n}")
        da, db = list(range(-n, 0)), list(range(n))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
        if len(da) != len(db):
            raise RuntimeError("both dimension lists should have same length")
    sa, sb = _shape(a), _shape(b)
    for i, j in zip(da, db):   # a size-1 dim broadcasts against its partner (PyTorch's): that one is summed first
        wi, wj = _wrap_dim(i, len(sa)), _wrap_dim(j, len(sb))
        if sa[wi] != sb[wj] and sb[wj] == 1:
            a = a.sum(wi, keepdim=True, dtype=a.dtype)
        elif sa[wi] != sb[wj] and sa[wi] == 1:
            b = b.sum(wj, keepdim=True, dtype=b.dtype)
    sa, sb = _shape(a), _shape(b)
    letters = iter(_LETTERS)
    ta = [next(letters) for _ in sa]
    tb = [next(letters) for _ in sb]
    for i, j in zip(da, db):
        wi, wj = _wrap_dim(i, len(sa)), _wrap_dim(j, len(sb))
        if sa[wi] != sb[wj]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {sa[wi]} in dim {i} and "
                               f"second has size {sb[wj]} in dim {j}")
        tb[wj] = ta[wi]
    contracted = set(tb) & set(ta)
    res = [c for c in ta if c not in contracted] + [c for c in tb if c not in contracted]
    _same_dtype_mm(a, b)
    eq = "".join(ta) + "," + "".join(tb) + "->" + "".join(res)
    sizes = tuple(sorted({**dict(zip(ta, sa)), **dict(zip(tb, sb))}.items()))
    return with_out(apply(_einsum, a, b, equation=eq, sizes=sizes), out)


@method()
def kron(input: Tensor, other: Tensor, *, out=None) -> Tensor:
    """Kronecker product (the lower-rank argument gets leading 1 dims)."""
    sa, sb = _shape(input), _shape(other)
    n = max(len(sa), len(sb))
    sa, sb = (1,) * (n - len(sa)) + sa, (1,) * (n - len(sb)) + sb
    a = reshape(input, tuple(s for d in sa for s in (d, 1)))
    b = reshape(other, tuple(s for d in sb for s in (1, d)))
    return with_out(reshape(a * b, tuple(x * y for x, y in zip(sa, sb))), out)
