"""The error-pattern-only link (:class:`FastLink`): decodes only words with more than t errors."""

from __future__ import annotations

import time

import numpy as np

from phy802._rng import spawn
from phy802.channel import Noiseless, Pam4Awgn, signs_to_values
from phy802.fec import decode_syndromes, syndromes_sparse
from phy802.link.config import _POP10
from phy802.link.counters import LinkCounters, LinkResult
from phy802.link._base import _Base, _flips, _seed_sequence, _sorted_unique


def _lane_sampler(channel, n_sym: int, rng: np.random.Generator):
    """Data-free line errors of one lane for i.i.d. uniform sent levels (scrambled data).

    Returns ``(positions, sent, received, neighbour_sent)`` where ``neighbour_sent(U)`` draws the
    sent level at error-free positions from its exact conditional law.
    """
    if isinstance(channel, Noiseless):
        e = np.zeros(0, np.int64)
        return e, e.astype(np.uint8), e.astype(np.uint8), None
    if isinstance(channel, Pam4Awgn):
        ev = channel.sample_iid_errors(n_sym, rng)
        T = channel.transition
        ok = np.clip(np.diag(T), 0.0, 1.0)
        law = ok / ok.sum() if ok.sum() > 0 else np.full(4, 0.25)  # P(sent = s | no error), uniform prior

        def nb(U):
            return rng.choice(4, size=U.size, p=law).astype(np.uint8)

        return (np.asarray(ev.positions, np.int64), np.asarray(ev.sent, np.uint8),
                np.asarray(ev.received, np.uint8), nb)
    if hasattr(channel, "sample_events"):  # burst models: error events independent of the data
        ev = channel.sample_events(n_sym, rng)
        sent = rng.integers(0, 4, ev.positions.size, dtype=np.uint8)
        recv = signs_to_values(sent, ev.signs)

        def nb(U):
            return rng.integers(0, 4, U.size, dtype=np.uint8)

        return np.asarray(ev.positions, np.int64), sent, recv, nb
    # any other channel: draw the whole line (exact, slower)
    line = rng.integers(0, 4, n_sym, dtype=np.uint8)
    err = channel.sample_symbol_errors(line, rng)
    pos = np.asarray(err.positions, np.int64)
    return pos, line[pos], np.asarray(err.values, np.uint8), lambda U: line[U]


def _padded_words(keys: np.ndarray, vals: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted symbol errors ``(keys = word * n + position, vals)`` as one padded row per word:
    ``(words, positions[W, m], values[W, m])`` (unused slots: position 0, value 0), the layout
    :func:`phy802.fec.syndromes_sparse` takes."""
    words, start, cnt = _sorted_unique(keys // n)
    rank = np.arange(keys.size) - np.repeat(start, cnt)
    row = np.repeat(np.arange(words.size), cnt)
    pos_pad = np.zeros((words.size, int(cnt.max())), np.int64)
    val_pad = np.zeros_like(pos_pad, dtype=np.uint16)
    pos_pad[row, rank] = keys % n
    val_pad[row, rank] = vals
    return words, pos_pad, val_pad


class FastLink(_Base):
    """Codeword-level simulator on the error pattern alone (see the module docstring).

    Same :class:`LinkConfig` (``level`` and ``payload`` are ignored), same geometry and counters
    as :class:`Link` (payload/frame counters stay 0).  Sent levels are taken i.i.d. uniform (the
    scrambled stream; AM and parity symbols are treated the same way).
    """

    def auto_batch(self) -> int:
        """Batch size (pairs) giving ~20000 line errors per lane per batch at the channels' SER
        (where they expose ``ser``), within 4096 .. 2^20 pairs: big batches at low BER amortise the
        fixed per-batch cost, small ones at high BER bound the memory."""
        sers = [float(getattr(ch, "ser", 0.0) or 0.0) for ch in self.channels]
        ser = max(sers) if sers else 0.0
        if ser <= 0:
            return 1 << 20
        pairs = 20000.0 / (ser * self.geometry.line_symbols_per_pair)
        return int(min(max(pairs, 4096), 1 << 20))

    def run(self, n_pairs: int, seed, *, batch_pairs: int | None = None, max_seconds: float | None = None,
            target_errors: int | None = None) -> LinkResult:
        """Simulate ``n_pairs`` pairs in batches (default :meth:`auto_batch`); optional early stop
        once ``target_errors`` codeword errors are seen or after ``max_seconds`` (checked between
        batches)."""
        if not isinstance(n_pairs, (int, np.integer)) or n_pairs <= 0:
            raise ValueError(f"n_pairs must be a positive int, got {n_pairs!r}")
        if batch_pairs is None:
            batch_pairs = self.auto_batch()
        ss = _seed_sequence(seed)
        ctr = self._new_counters()
        t0 = time.perf_counter()
        done = 0
        while done < n_pairs:
            P = min(int(batch_pairs), int(n_pairs) - done)
            self.run_batch(P, ss.spawn(1)[0], ctr)
            done += P
            if target_errors is not None and ctr.codeword_errors >= target_errors:
                break
            if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
                break
        ctr.seconds = time.perf_counter() - t0
        return LinkResult(self.config, ctr, np.zeros(0, np.int64))

    def run_batch(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters) -> LinkCounters:
        """Add one batch of ``P`` pairs (one independent transmission) to ``ctr``."""
        cfg, g = self.config, self.geometry
        d0, d1 = cfg.data_slice
        per_lane = self._sample_lanes(P, ss, ctr)
        L, u, c, t, b = self._line_counts(ctr, per_lane)
        C = 2 * P
        ctr.codewords += C
        ctr.pairs += P
        ctr.message_bits += C * (d1 - d0) * 10
        ukey, uval = self._symbol_errors(c, t, b, g.n)
        w = self._pre_symbol_counts(ctr, ukey, C)
        if ukey.size == 0:
            return ctr
        # residual error pattern at the decoder output, as (key, value)
        if cfg.decoder == "correct":
            res_key, res_val, flagged_words = self._correct(ctr, ukey, uval, w)
        elif cfg.decoder == "detect":
            res_key, res_val, flagged_words = ukey, uval, self._detect(ctr, ukey, uval, w)
        else:
            res_key, res_val, flagged_words = ukey, uval, np.zeros(0, np.int64)
        self._count_llr(ctr, flagged_words)
        self._count_delivered(ctr, res_key, res_val, flagged_words)
        return ctr

    def _sample_lanes(self, P: int, ss: np.random.SeedSequence, ctr: LinkCounters) -> list:
        """Line errors of ``P`` pairs on every physical lane, as ``(n_errors, flipped line bits)``
        per lane (after the precoder, if any); counts the line symbols."""
        cfg, g = self.config, self.geometry
        n_sym = P * g.line_symbols_per_pair
        rngs = spawn(ss, g.n_phys)
        per_lane = []
        for i, ch in enumerate(self.channels):
            pos, sent, recv, nb = _lane_sampler(ch, n_sym, rngs[i])
            q = _flips(pos, sent, recv, n_sym, cfg.precoding, cfg.precoder_init, nb)
            per_lane.append((int(pos.size), q))
        ctr.line_symbols += n_sym * g.n_phys
        return per_lane

    def _correct(self, ctr: LinkCounters, ukey: np.ndarray, uval: np.ndarray,
                 w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The correcting decoder on the symbol errors ``(ukey, uval)`` (codeword weights ``w``):
        words of weight <= t are corrected without decoding, only the heavier ones are decoded.
        Returns the residual pattern ``(key, value)`` and the words the decoder flags."""
        g, code = self.geometry, self.config.rs
        wc = ukey // g.n
        wt = ukey % g.n
        light = (w[wc] <= code.t)
        fixed_words = _sorted_unique(wc[light])[0]
        ctr.corrected_codewords += int(fixed_words.size)
        ctr.corrected_symbols += int(light.sum())
        ctr.pcs_lane_corrected += np.bincount(g.lane_of[wc[light] % 2, wt[light]], minlength=g.n_pcsl).astype(np.int64)
        hk, hv = ukey[~light], uval[~light]
        if not hk.size:
            return hk, hv, np.zeros(0, np.int64)
        words, pos_pad, val_pad = _padded_words(hk, hv, g.n)
        S = syndromes_sparse(code, pos_pad, val_pad)
        cpos, cval, ccnt = decode_syndromes(code, S)  # only the heavy words are decoded
        mis = ccnt >= 0
        ctr.uncorrected_codewords += int((~mis).sum())
        ctr.miscorrected_codewords += int(mis.sum())
        ctr.corrected_codewords += int(mis.sum())
        res_key, res_val = hk, hv
        if mis.any():
            res_key, res_val = self._miscorrect(ctr, hk, hv, words, mis, cpos, cval)
        return res_key, res_val, words[~mis]

    def _miscorrect(self, ctr: LinkCounters, hk: np.ndarray, hv: np.ndarray, words: np.ndarray, mis: np.ndarray,
                    cpos: np.ndarray, cval: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """XOR the decoder's wrong corrections (``cpos``/``cval`` of the ``mis`` words) into the
        heavy words' error pattern ``(hk, hv)``; returns the residual pattern, zero entries dropped."""
        g = self.geometry
        used = (cpos >= 0) & mis[:, None]
        mr, mcol = np.nonzero(used)
        cw_of = words[mr]
        ctr.corrected_symbols += int(mr.size)
        ctr.pcs_lane_corrected += np.bincount(g.lane_of[cw_of % 2, cpos[mr, mcol]],
                                              minlength=g.n_pcsl).astype(np.int64)
        allk = np.concatenate([hk, cw_of.astype(np.int64) * g.n + cpos[mr, mcol]])
        allv = np.concatenate([hv, cval[mr, mcol]]).astype(np.int64)
        o = np.argsort(allk, kind="stable")
        allk, allv = allk[o], allv[o]
        uk, st, _ = _sorted_unique(allk)
        uv = np.bitwise_xor.reduceat(allv, st)
        nz = uv != 0
        return uk[nz], uv[nz].astype(np.uint16)

    def _detect(self, ctr: LinkCounters, ukey: np.ndarray, uval: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The detect-only decoder: the words it flags (every errored word of weight <= 2t, and
        the heavier ones whose syndrome is nonzero)."""
        g, code = self.geometry, self.config.rs
        wc = ukey // g.n
        words = _sorted_unique(wc)[0]
        flagged = w[words] <= 2 * code.t  # d = 2t + 1: a nonzero pattern of weight <= 2t is seen
        heavy = words[~flagged]
        if heavy.size:
            sel = np.isin(wc, heavy)
            _, pos_pad, val_pad = _padded_words(ukey[sel], uval[sel], g.n)
            flagged[~flagged] = np.any(syndromes_sparse(code, pos_pad, val_pad) != 0, axis=1)
        flagged_words = words[flagged]
        ctr.uncorrected_codewords += int(flagged_words.size)
        return flagged_words

    def _count_delivered(self, ctr: LinkCounters, res_key: np.ndarray, res_val: np.ndarray,
                         flagged_words: np.ndarray) -> None:
        """Count the residual errors in the message symbols and the codewords they make wrong
        (undetected: not among the flagged words)."""
        g = self.geometry
        d0, d1 = self.config.data_slice
        rpos = res_key % g.n
        msg = (rpos >= d0) & (rpos < d1)
        mk, mv = res_key[msg], res_val[msg]
        ctr.post_fec_symbol_errors += int(mk.size)
        ctr.post_fec_bit_errors += int(_POP10[mv].sum())
        bad_words = _sorted_unique(mk // g.n)[0]
        ctr.codeword_errors += int(bad_words.size)
        ctr.undetected_codeword_errors += int(np.count_nonzero(~np.isin(bad_words, flagged_words)))
