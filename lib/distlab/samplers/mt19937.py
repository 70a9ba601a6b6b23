"""``std::mt19937``: the 32-bit Mersenne Twister exactly as the C++ standard defines it.

    gen = MT19937(seed=5)           # std::mt19937 gen(5);
    gen.next_raw(3)                 # three calls of gen(), as a uint32 array

Seeding follows [rand.eng.mers]: ``x[0] = seed mod 2**32``,
``x[i] = (1812433253 * (x[i-1] ^ (x[i-1] >> 30)) + i) mod 2**32``; so a C++ ``size_t`` seed (as
libtorch passes its epoch) is taken modulo 2**32. The state transition ("twist") and the output
tempering are written here in NumPy (:func:`twist`, :func:`temper`), one 624-word block at a time.
Bulk output reuses NumPy's C implementation of the same generator (``numpy.random.MT19937``) with
the state set to the words computed here; tests check both paths against each other and against a
compiled ``std::mt19937``.
"""

from __future__ import annotations

import numpy as np

from distlab._checks import check_choice, check_int, check_str

__all__ = ["MT19937", "seed_state", "twist", "temper", "N", "M"]

N, M = 624, 397
_MATRIX_A = np.uint32(0x9908B0DF)
_UPPER, _LOWER = np.uint32(0x80000000), np.uint32(0x7FFFFFFF)
_MASK32 = 0xFFFFFFFF


def seed_state(seed: int) -> np.ndarray:
    """The 624 state words of ``std::mt19937(seed)`` (seed taken modulo 2**32)."""
    x = [check_int("seed", seed) & _MASK32]
    for i in range(1, N):
        prev = x[-1]
        x.append((1812433253 * (prev ^ (prev >> 30)) + i) & _MASK32)
    return np.array(x, dtype=np.uint32)


def _twist_rows(new: np.ndarray, old: np.ndarray, lo: int, hi: int) -> None:
    """new[i] for i in [lo, hi), whose inputs new[i + M - N] / old[i + M] are already final."""
    nxt = old[lo + 1:hi + 1] if hi < N else np.concatenate([old[lo + 1:N], new[:1]])
    y = (old[lo:hi] & _UPPER) | (nxt & _LOWER)
    mag = np.where((y & np.uint32(1)) != 0, _MATRIX_A, np.uint32(0))
    src = old[lo + M:hi + M] if hi + M <= N else new[lo + M - N:hi + M - N]
    new[lo:hi] = src ^ (y >> np.uint32(1)) ^ mag


def twist(state: np.ndarray) -> np.ndarray:
    """The next 624-word state (the generator's ``_M_gen_rand``), vectorised in four slices."""
    old = np.asarray(state, dtype=np.uint32)
    new = np.empty_like(old)
    # x[i] depends on x[i+1] (old) and x[i+M] (old while i + M < N, else the new x[i+M-N])
    _twist_rows(new, old, 0, N - M)                       # 0..226: all inputs old
    _twist_rows(new, old, N - M, 2 * (N - M))             # 227..453: new[0..226]
    _twist_rows(new, old, 2 * (N - M), N - 1)             # 454..622: new[227..395]
    # the last word pairs old x[623] with the new x[0] and reads new x[396]
    y = (old[N - 1] & _UPPER) | (new[0] & _LOWER)
    new[N - 1] = new[M - 1] ^ (y >> np.uint32(1)) ^ (_MATRIX_A if y & 1 else np.uint32(0))
    return new


def temper(words: np.ndarray) -> np.ndarray:
    """The output function applied to state words (``uint32`` in, ``uint32`` out)."""
    y = np.asarray(words, dtype=np.uint32).copy()
    y ^= y >> np.uint32(11)
    y ^= (y << np.uint32(7)) & np.uint32(0x9D2C5680)
    y ^= (y << np.uint32(15)) & np.uint32(0xEFC60000)
    y ^= y >> np.uint32(18)
    return y


class MT19937:
    """A ``std::mt19937`` stream: ``next_raw(k)`` returns the next ``k`` values of ``gen()``.

    Args:
        seed: any int; used modulo 2**32 as ``std::mt19937``'s ``size_t`` constructor does.
        engine: ``"numpy"`` (default) generates with NumPy's C Mersenne Twister from the state
            computed here; ``"reference"`` uses :func:`twist` and :func:`temper` (slower).
    """

    def __init__(self, seed: int = 5489, *, engine: str = "numpy") -> None:
        check_choice("engine", check_str("engine", engine), ("numpy", "reference"))
        self.engine = engine
        key = seed_state(seed)
        if engine == "numpy":
            self._bitgen = np.random.MT19937(0)
            # pos=N: the first call twists, exactly like a freshly seeded std::mt19937
            self._bitgen.state = {"bit_generator": "MT19937",
                                  "state": {"key": key, "pos": N}}
        else:
            self._key, self._pos = key, N

    def next_raw(self, count: int) -> np.ndarray:
        """The next ``count`` outputs as a ``uint32`` array (``count`` >= 0)."""
        count = check_int("count", count, minimum=0)
        if self.engine == "numpy":
            return self._bitgen.random_raw(int(count)).astype(np.uint32)
        out = np.empty(int(count), dtype=np.uint32)
        filled = 0
        while filled < count:
            if self._pos == N:
                self._key, self._pos = twist(self._key), 0
            take = min(int(count) - filled, N - self._pos)
            out[filled:filled + take] = temper(self._key[self._pos:self._pos + take])
            self._pos += take
            filled += take
        return out

    def __call__(self) -> int:
        """One output, like ``gen()``."""
        return int(self.next_raw(1)[0])
