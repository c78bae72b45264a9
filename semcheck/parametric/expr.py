"""The values of a kernel's program as functions of the device index `d`, the round `k` of its
loop and the device count `N`: the small grammar a uniform family's template is written in,
fitted from the values the kernel had at a few device counts.

    value = c + ck*k + cn*N + cd*d + s * ((mk*k + md*d + mc) mod Q)

with integer coefficients and Q either N or a small constant (a double buffer's `k % 2`). A
device id of a ring is `(d + c) mod N`; a slot an all-gather forwards is `(d - k) mod N`; a
receive semaphore per round is `k`. Every form is evaluated concretely (`value`) and as a z3
term over symbolic d, k and N (`term`), where `x mod N` becomes linear arithmetic with a
bounded quotient, so every query stays in linear integer arithmetic.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Sequence

from semcheck.records import record

N_MOD = 0  # `modulus` of a term taken mod N

# (d, k, N, value): one value the kernel had
Sample = tuple[int, int, int, int]


@record(frozen=True)
class Expr:
    const: int = 0
    k: int = 0
    n: int = 0
    d: int = 0
    scale: int = 0  # coefficient of the mod term; 0: no mod term
    mod_k: int = 0
    mod_d: int = 0
    mod_c: int = 0
    modulus: int = N_MOD
    mod_n: int = 0  # a small modulus may also take N (the parity of the last round)

    # -- reading it --

    def value(self, d: int, k: int, n: int) -> int:
        out = self.const + self.k * k + self.n * n + self.d * d
        if self.scale:
            q = n if self.modulus == N_MOD else self.modulus
            out += self.scale * ((self.mod_k * k + self.mod_d * d + self.mod_n * n + self.mod_c) % q)
        return out

    @property
    def constant(self) -> int | None:
        """The value when it is one number at every d, k and N."""
        return self.const if not (self.k or self.n or self.d or self.scale) else None

    @property
    def uses_d(self) -> bool:
        return bool(self.d or (self.scale and self.mod_d))

    @property
    def uses_k(self) -> bool:
        return bool(self.k or (self.scale and self.mod_k))

    @property
    def uses_n(self) -> bool:
        return bool(self.n or (self.scale and (self.mod_n or self.modulus == N_MOD)))

    def device_offset(self) -> int | None:
        """c when this is the ring neighbour `(d + c) mod N`, else None."""
        if (self.scale == 1 and self.modulus == N_MOD and self.mod_d == 1 and not self.mod_k
                and not (self.const or self.k or self.n or self.d)):
            return self.mod_c
        return None

    def __str__(self) -> str:
        parts = []
        for coeff, name in ((self.k, "k"), (self.n, "N"), (self.d, "d")):
            if coeff:
                parts.append(_term(coeff, name))
        if self.scale:
            inner = " + ".join(_term(c, v) for c, v in ((self.mod_d, "d"), (self.mod_k, "k"), (self.mod_n, "N")) if c)
            inner = inner or "0"
            if self.mod_c:
                inner += f" + {self.mod_c}"
            inner = inner.replace("+ -", "- ")
            q = "N" if self.modulus == N_MOD else str(self.modulus)
            parts.append(_term(self.scale, f"(({inner}) mod {q})"))
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")

    # -- as a z3 term --

    def term(self, d, k, n, side: list, n_min: int, k_max: tuple[int, int]):
        """A z3 integer term for this value at symbolic (d, k, N), `side` collecting the
        constraints that define its mod-N part (a fresh remainder and a quotient bounded by
        what d < N and k < a*N + b allow, for N >= n_min)."""
        import z3

        out = self.const + self.k * k + self.n * n + self.d * d
        if not self.scale:
            return out
        inner = self.mod_k * k + self.mod_d * d + self.mod_n * n + self.mod_c
        if self.modulus != N_MOD:
            return out + self.scale * (inner % self.modulus)
        rem = z3.FreshInt("rem")
        side.append(z3.And(rem >= 0, rem < n))
        # |inner| <= (|mk|*a + |md|) * N + |mk|*|b| + |mc|: the quotient is bounded by that over N
        a, b = k_max
        bound = abs(self.mod_k) * a + abs(self.mod_d) + (abs(self.mod_k * b) + abs(self.mod_c)) // max(n_min, 1) + 2
        side.append(z3.Or(*[inner - rem == q * n for q in range(-bound, bound + 1)]))
        return out + self.scale * rem


def _term(coeff: int, name: str) -> str:
    return name if coeff == 1 else f"-{name}" if coeff == -1 else f"{coeff}*{name}"


def const(value: int) -> Expr:
    return Expr(const=value)


def neighbour(offset: int) -> Expr:
    return Expr(scale=1, mod_d=1, mod_c=offset)


# --- fitting -----------------------------------------------------------------------------------

# The inner forms a mod term is tried with, simplest first.
_SMALL_MODULI = (2, 3, 4, 6, 8)
_COEFFS = (1, -1, 2, -2)


def fit(samples: Sequence[Sample]) -> Expr | None:
    """The simplest expression that gives every sample's value, or None. Samples from several
    device counts are needed to tell `d + 1` from `(d + 1) mod N`."""
    samples = list(dict.fromkeys(samples))
    if not samples:
        return None
    values = {v for *_, v in samples}
    if len(values) == 1:
        return const(values.pop())
    affine = _fit_linear(samples, lambda d, k, n: (1, k, n, d))
    if affine is not None:
        c, ck, cn, cd = affine
        return Expr(const=c, k=ck, n=cn, d=cd)
    for mod in _mod_forms(samples):
        for columns, build in _WITH_MOD:
            found = _fit_linear(samples, lambda d, k, n, m=mod, cols=columns: cols(d, k, n, m.value(d, k, n)))
            if found is not None:
                return build(found, mod)
    return None


_WITH_MOD = (
    (lambda d, k, n, m: (1, n, m), lambda c, m: replace(m, const=c[0], n=c[1], scale=c[2])),
    (lambda d, k, n, m: (1, k, n, d, m), lambda c, m: replace(m, const=c[0], k=c[1], n=c[2], d=c[3], scale=c[4])),
)


def _mod_forms(samples: Sequence[Sample]):
    uses_d = len({d for d, *_ in samples}) > 1
    uses_k = len({k for _, k, *_ in samples}) > 1
    triples = [(mk, md, mn) for mk in (0, *_COEFFS) for md in (0, *_COEFFS) for mn in (0, 1, -1)
               if (mk or md or mn) and (uses_k or not mk) and (uses_d or not md)]
    triples.sort(key=lambda p: (abs(p[2]), abs(p[0]) + abs(p[1]), abs(p[0]), p[1] < 0, -p[0], -p[1], -p[2]))
    for modulus in (N_MOD, *_SMALL_MODULI):
        offsets = range(-4, 5) if modulus == N_MOD else range(modulus)
        for (mk, md, mn), mc in itertools.product(triples, sorted(offsets, key=abs)):
            if modulus == N_MOD and mn:
                continue
            yield Expr(scale=1, mod_k=mk, mod_d=md, mod_n=mn, mod_c=mc, modulus=modulus)


def _fit_linear(samples: Sequence[Sample], columns) -> tuple[int, ...] | None:
    """Integer coefficients x with columns(d, k, n) . x == value for every sample (unknowns
    that the samples cannot tell apart are 0), or None. Solved on a spread of the samples
    and checked on all of them (most candidate forms fail on the first few); the whole set
    is solved only when the spread could not tell every unknown apart."""
    rows = [(columns(d, k, n), v) for d, k, n, v in samples]
    if len(rows) > 32:
        spread = rows[:: max(1, len(rows) // 24)] + rows[:4] + rows[-4:]
        found, full_rank = _solve(spread)
        if found is not None and all(sum(a * b for a, b in zip(row, found)) == v for row, v in rows):
            return found
        if full_rank:
            return None
    found, _ = _solve(rows)
    if found is None or any(sum(a * b for a, b in zip(row, found)) != v for row, v in rows):
        return None
    return found


def _solve(rows) -> tuple[tuple[int, ...] | None, bool]:
    """Integer coefficients solving `rows` (free unknowns 0), and whether the rows fix every
    unknown; (None, _) when no integer solution fits. Floating point with partial pivoting
    (the values are small integers, at most five unknowns); the caller checks the rounded
    answer exactly, row by row, so rounding can only cost a fit, never make a wrong one."""
    width = len(rows[0][0])
    basis: list[tuple[list[float], float]] = []
    pivots: list[int] = []
    for row, v in rows:
        r = [float(x) for x in row]
        rv = float(v)
        for (brow, bv), p in zip(basis, pivots):
            if r[p]:
                f = r[p] / brow[p]
                r = [a - f * b for a, b in zip(r, brow)]
                rv -= f * bv
        lead = max(range(width), key=lambda i: abs(r[i]))
        if abs(r[lead]) < 1e-9:
            if abs(rv) > 1e-6:
                return None, True  # inconsistent
            continue
        basis.append((r, rv))
        pivots.append(lead)
        if len(basis) == width:
            break
    x = [0.0] * width
    for (brow, bv), p in reversed(list(zip(basis, pivots))):
        x[p] = (bv - sum(brow[i] * x[i] for i in range(width) if i != p)) / brow[p]
    full = len(basis) == width
    rounded = tuple(round(c) for c in x)
    if any(abs(c - r) > 1e-6 for c, r in zip(x, rounded)):
        return None, full
    return rounded, full
