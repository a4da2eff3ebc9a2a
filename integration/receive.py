"""The receive path: a message's delivery over its link (``protocol.delivery``), reserved at issue,
and its flips, guard, norms, counters and log applied to what the rank received (host or device)."""

from __future__ import annotations

import math

import numpy as np
import torch

from integration._kernels import receive_flips, sum_squares
from integration.registration import BACKEND_NAME
from integration.replay import (
    _SIGN_EXP_BITS,
    _WORD,
    InjectionLog,
    Metrics,
    corrupt_received,
    guard_flipped,
    guard_values,
    is_corruptible,
    is_float,
)
from integration.sources import BufferedLink, ErrorSource, NoErrors, make_link_source
from protocol.delivery import deliver

_FORMAT = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}


class ReceivePath:
    """The receive path of :class:`integration.process_group.ReplayProcessGroup` (a mixin: the state is set in its ``__init__``)."""

    @property
    def metrics(self) -> Metrics:
        """Per-rank counters (:class:`integration.replay.Metrics`); reading them syncs device sums (one transfer)."""
        if self._dev_acc or self._dev_log:
            self.sync_device()
        return self._metrics

    @property
    def log(self) -> InjectionLog:
        """The injection log; reading it syncs the device path's pending values (one transfer)."""
        if self._dev_log or self._dev_acc:
            self.sync_device()
        return self._log

    def sync_device(self) -> None:
        """Bring the device path's accumulated sums and log values to the host (one stacked transfer)."""
        with self._lock:
            acc, self._dev_acc = self._dev_acc, {}
            logs, self._dev_log = self._dev_log, []
        if self._dev_streams:  # values made on other streams: the reading stream waits for them
            cur = torch.cuda.current_stream()
            for other in self._dev_streams:
                if other != cur:
                    cur.wait_stream(other)
        if acc:
            keys = list(acc)
            vals = torch.stack([acc[k].double() for k in keys]).cpu().numpy()
            for (name, cls), v in zip(keys, vals):
                v = float(v)
                if name in ("perturbation_sq", "signal_sq"):
                    if v or name == "signal_sq":
                        self._metrics.add(name, cls, v if math.isfinite(v) or name == "perturbation_sq" else 0.0)
                elif v:
                    self._metrics.add(name, cls, int(round(v)))
        if logs:
            both = torch.cat([torch.stack([b, a]) for *_, b, a in logs], dim=1).cpu().numpy()
            j = 0
            for seq, op, cls, src, hop, elem, bit, msg_bit, inv, b, a in logs:
                m = b.numel()
                old, new = both[0, j:j + m][inv], both[1, j:j + m][inv]
                j += m
                self._log.add(seq=seq, op=op, cls=cls, src=src, dst=self._rank, hop=hop, element=elem, bit=bit,
                              old=old, new=new, msg_bit=msg_bit)

    def _dadd(self, name: str, cls: str, v: torch.Tensor) -> None:
        key = (name, cls)
        cur = self._dev_acc.get(key)
        if cur is not None and v.is_cuda:
            self._cross_stream(cur)
        self._dev_acc[key] = v if cur is None else cur + v

    def _cross_stream(self, t: torch.Tensor) -> None:
        """Before the current stream reads ``t`` (made on another stream: an op issued on FSDP2's or a
        user's stream): the current stream waits for the streams the device path used, and ``t``'s
        memory is not reused before the current stream is done with it (the caching allocator frees a
        block for its allocation stream only)."""
        cur = torch.cuda.current_stream(t.device)
        for other in self._dev_streams:
            if other != cur:
                cur.wait_stream(other)
                t.record_stream(cur)
        self._dev_streams.add(cur)

    def link_source(self, src: int, dst: int) -> ErrorSource:
        """The error source of link ``src -> dst`` (read ahead by the wrapper: do not take from it)."""
        key = (int(src), int(dst))
        s = self._sources.get(key)
        if s is None:
            s = self._sources[key] = make_link_source(self.config.source, src, dst)
        return s

    def _deliver(self, src: int, source: ErrorSource, octets: int, dtype: torch.dtype, dst: int | None = None,
                 link: BufferedLink | None | bool = False):
        """``protocol.delivery.deliver`` of one message over link ``src -> rank`` (same result).

        Sources whose offsets do not depend on how the stream is cut (live generator, independent
        flips) go through a :class:`BufferedLink` (read-ahead + one Numba pass per message); others
        (traces) through ``deliver`` itself. ``link``: the link's :meth:`_buffered`, when the caller has it.
        """
        fmt = _FORMAT.get(dtype, "float32")
        if link is False:
            link = self._buffered(src, source, self._rank if dst is None else dst)
        if link is not None:
            return link.deliver(octets, fmt)
        return deliver(octets, source, self._fec, rate=self.config.source.rate, float_format=fmt,
                       code=self.config.source.code, retransmit=self._retx)

    def _buffered(self, src: int, source: ErrorSource, dst: int) -> BufferedLink | None:
        """Link ``src -> dst``'s :class:`BufferedLink` over ``source`` (made on first use), None for a
        source that must be read through ``deliver`` itself (traces)."""
        key = (src, dst)
        link = self._links.get(key, False)
        if link is False:
            link = self._links[key] = (BufferedLink(source, self._fec, rate=self.config.source.rate,
                                                    code=self.config.source.code, retransmit=self._retx)
                                       if BufferedLink.supports(source) else None)
        return link

    def _classify(self, default: str, t: torch.Tensor, op: str = "") -> str:
        if not is_corruptible(t, op) or t.numel() <= 1:
            return "control"
        return self._override or default

    def _reserve(self, op: str, cls: str, t: torch.Tensor, src: int, hop: int = 0) -> tuple | None:
        """Send the message over link ``src -> rank`` (``protocol.delivery``); return a pending corruption.

        The delivery model cuts the message into RoCEv2 frames, takes their stream bits from the
        link's source, drops and resends frames whose headers (or, in non-tolerant modes, any
        checked bit) were hit, removes protected flips in ``unequal`` mode, and returns the
        payload bits delivered flipped. ``None`` when nothing is to be done on receive; a pending
        corruption with no flips still measures the message's norm (``signal_sq``).
        """
        if not self._enabled or src == self._rank:
            return None
        octets = t.numel() * t.element_size()
        with self._lock:
            seq = self._seq
            self._seq += 1
            rx = self._rx.get(src)
            if rx is None:  # link src -> rank: its source, and its BufferedLink (None: deliver() itself)
                source = self.link_source(src, self._rank)
                buffered = None if isinstance(source, NoErrors) else self._buffered(src, source, self._rank)
                rx = self._rx[src] = (source, buffered)
            source, buffered = rx
            m = self._metrics
            if buffered is None and isinstance(source, NoErrors):  # error-free link: only the bit accounting
                sb, lb = self._clean_cost(octets)
                source.take(sb)
                m.add_message(cls, 8 * octets, sb, lb)
                self._log.add_message(seq, op, cls, src, self._rank, hop, 8 * octets, sb, 0)
                return None
            d = self._deliver(src, source, octets, t.dtype, link=buffered)
            flips = d.payload_flips
            m.add_message(cls, 8 * octets, d.stream_bits, d.line_bits, d.frames_resent, d.frames_lost,
                          d.protected_removed)
            if d.frames_lost:
                self._note_loss(op, cls, src, d)
            self._log.add_message(seq, op, cls, src, self._rank, hop, 8 * octets, d.stream_bits, len(flips))
            if cls not in self._selected or not is_corruptible(t, op):
                if len(flips):
                    m.add("errors_unselected", cls, len(flips))
                return None
        return (seq, op, cls, src, hop, flips)

    def _clean_cost(self, octets: int) -> tuple[int, int]:
        """``(stream_bits, line_bits)`` of an error-free message (cached per size)."""
        c = self._cost_cache.get(octets)
        if c is None:
            from protocol.framing import line_bits_of_stream, stream_bits

            sb = stream_bits(8 * octets) if octets else 0
            c = self._cost_cache[octets] = (sb, line_bits_of_stream(sb, self.config.source.rate, self.config.source.code))
        return c

    def _apply(self, pending: tuple, t: torch.Tensor, elem_base: int = 0, vals: np.ndarray | None = None) -> None:
        """Apply a reserved corruption to the received contiguous flat tensor ``t``, then the guard.

        The guard (``nan_to_zero_clamp``) acts on the flipped elements only; nothing the link did
        not touch is changed. ``vals``: ``t``'s elements as a flat numpy view (:meth:`_host_view`),
        when the caller has one.
        """
        if self.force_device_path or (vals is None and t.device.type == "cuda"):
            return self._apply_device(pending, t, elem_base)
        if vals is not None or t.dtype in _WORD:  # fp32 / fp64 on the CPU: norm, flips, guard and changes in one Numba pass
            return self._apply_cpu_fused(pending, t, elem_base, vals)
        guard = self.config.guard
        seq, op, cls, src, hop, flips = pending
        x = t.detach()
        if self.config.measure_noise:
            xn = x if x.dtype in _FORMAT else x.float()  # float8 / uint8: no promotion in vector_norm
            sig = float(torch.linalg.vector_norm(xn, dtype=torch.float32 if xn.element_size() < 4 else None)) ** 2
        else:
            sig = math.nan  # not measured: nothing added (math.isfinite is False)
        if len(flips) == 0:
            if math.isfinite(sig):
                with self._lock:
                    self._metrics.add("signal_sq", cls, sig)
            return
        elem, bit, old, new, idx, n_prot = corrupt_received(
            t, flips, protect_sign_exponent=(guard == "exponent_protection"))
        nonfinite = bool(len(new)) and not bool(np.isfinite(new).all())
        n_guard, n_skip, pert = 0, 0, 0.0
        if len(elem):
            # elements are non-decreasing (delivered flips are sorted): runs instead of np.unique
            brk = np.flatnonzero(elem[1:] != elem[:-1]) + 1
            first = np.concatenate((np.zeros(1, np.int64), brk))
            eu = elem[first]
            if guard == "nan_to_zero_clamp" and is_float(t):  # float8 too, at its bound (clamp_bound)
                n_guard, final = guard_flipped(t, eu, self.config.clamp_for(cls))
            else:
                if guard in ("nan_to_zero_clamp", "exponent_protection") and not is_float(t):
                    n_skip = len(eu)  # FSDP2's uint8 all-gather: no float layout, delivered as flipped
                final = new[np.concatenate((brk, [len(elem)])) - 1]  # value after the element's last flip
            if self.config.measure_noise:
                with np.errstate(all="ignore"):
                    o = old[first]
                    dv = np.where(np.isfinite(o), final - o, 0.0)  # a clean Inf/NaN is not the link's doing
                    pert = float(np.sum(dv * dv)) if np.isfinite(final[np.isfinite(o)]).all() else math.inf
        self._account(seq, op, cls, src, hop, elem, bit, old, new, flips[idx], elem_base,
                      sig, pert, n_prot, nonfinite, n_guard, n_skip)

    def _apply_cpu_fused(self, pending: tuple, t: torch.Tensor, elem_base: int, vals: np.ndarray | None = None) -> None:
        """:meth:`_apply` for a CPU fp32/fp64 tensor: one Numba call (:func:`integration._kernels.receive_flips`).

        Same results as the general path (tested): the clean message's squared norm
        (:func:`integration._kernels.sum_squares`, fp32 blocks summed in float64), the flips, the
        guard on the flipped elements, the sum of squared changes of the flipped elements (float64,
        element order). One kernel call and one scratch allocation per message: on this CPU every
        call into torch or numpy costs microseconds, and the receive path runs once per bucket.
        """
        seq, op, cls, src, hop, flips = pending  # flips: int64, as every delivery gives them
        measure = self._measure
        if vals is None:
            vals = self._host_view(t)
        k = len(flips)
        if k == 0:
            if measure:
                sig = sum_squares(vals)
                if math.isfinite(sig):
                    with self._lock:
                        self._metrics.add("signal_sq", cls, sig)
            return
        lo, hi = _SIGN_EXP_BITS[t.dtype] if self._protect else (1, 0)
        clamp = self._clamps.get(cls)
        if clamp is None:
            clamp = self._clamp_of(cls)
        block = np.empty((5, k), np.int64)  # filled as an InjectionLog block, kept by the log
        wide = vals.itemsize == 8
        n, n_prot, n_bad, n_guard, sig, pert = receive_flips(
            vals, vals.view(np.uint64 if wide else np.uint32), flips, 64 if wide else 32, lo, hi,
            clamp, measure, block, elem_base)
        with self._lock:
            self._metrics.add_received(cls, n, sig, pert, n_prot, n_bad > 0, n_guard)
            self._log.add_block(seq, op, cls, src, self._rank, hop, block, n)

    def _clamp_of(self, cls: str) -> float:
        """The receive clamp of class ``cls`` for the kernel (-1: no ``nan_to_zero_clamp``), kept in ``_clamps``."""
        c = self._clamps[cls] = float(self.config.clamp_for(cls)) if self.config.guard == "nan_to_zero_clamp" else -1.0
        return c

    def _account(self, seq, op, cls, src, hop, elem, bit, old, new, msg_bit, elem_base, sig, pert, n_prot,
                 nonfinite, n_guard, n_skip=0) -> None:
        """Counters and log of one received message's applied flips (one lock, one pass)."""
        with self._lock:
            self._metrics.add_received(cls, len(elem), sig, pert, n_prot, nonfinite, n_guard, n_skip)
            self._log.add(seq=seq, op=op, cls=cls, src=src, dst=self._rank, hop=hop,
                          element=elem + elem_base if elem_base else elem,
                          bit=bit, old=old, new=new, msg_bit=msg_bit)

    def _apply_device(self, pending: tuple, t: torch.Tensor, elem_base: int = 0) -> None:
        """:meth:`_apply` without a host sync: device ops on the current stream, sums and log values on the device.

        The flip positions are host data (the delivery model ran at issue); they travel to the
        device through pinned memory without blocking. Nothing is read back here: signal/perturbation
        sums, non-finite events and guard counts are device scalars, and the log's old/new values
        device tensors, until :meth:`sync_device` (reading ``metrics`` or ``log``) fetches them all
        at once. Same results as :meth:`_apply` (tested on CPU with ``force_device_path``).
        """
        guard = self.config.guard
        seq, op, cls, src, hop, flips = pending
        x = t.detach().view(-1)
        dev = x.device
        measure = self.config.measure_noise
        if measure:
            xn = x if x.dtype in _FORMAT else x.float()
            # fp32/fp64 accumulate in float64, as the host path's sum_squares (the fp32 norm is ~1e-5 off)
            acc = torch.float64 if x.dtype in _WORD else (torch.float32 if xn.element_size() < 4 else None)
            sig = torch.linalg.vector_norm(xn, dtype=acc).double() ** 2
            with self._lock:  # a non-finite clean message adds nothing (as the host path)
                self._dadd("signal_sq", cls, torch.where(torch.isfinite(sig), sig, torch.zeros_like(sig)))
        if len(flips) == 0:
            return
        offsets = np.asarray(flips, dtype=np.int64)
        isz = t.element_size()
        nbits = 8 * x.numel() * isz
        idx = np.flatnonzero((offsets >= 0) & (offsets < nbits))
        offs = offsets[idx]
        elem, bit = offs // (8 * isz), offs % (8 * isz)
        n_prot = 0
        if guard == "exponent_protection" and len(offs) and t.dtype != torch.uint8:
            from integration.replay import protected_bit_range

            lo, hi = protected_bit_range(t.dtype)
            keep = (bit < lo) | (bit > hi)
            n_prot = int(len(offs) - keep.sum())
            offs, elem, bit, idx = offs[keep], elem[keep], bit[keep], idx[keep]
        if len(offs) == 0:
            if n_prot:
                with self._lock:
                    self._metrics.add("errors_protected", cls, n_prot)
            return
        byte, first_b = np.unique(offs >> 3, return_index=True)
        masks = np.bitwise_or.reduceat((np.uint8(1) << (offs & 7).astype(np.uint8)), first_b)
        e_u, inv = np.unique(elem, return_inverse=True)

        def h2d(a: np.ndarray) -> torch.Tensor:
            h = torch.from_numpy(np.ascontiguousarray(a))
            return h.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else h

        eidx, bidx, mk = h2d(e_u), h2d(byte), h2d(masks)
        u8 = x.view(torch.uint8)
        before = x[eidx].double()
        u8.index_put_((bidx,), u8[bidx] ^ mk)
        after = x[eidx].double()
        final = after
        if guard == "nan_to_zero_clamp" and is_float(t):  # float8 too, at its bound (clamp_bound)
            bad, nv = guard_values(x, eidx, self.config.clamp_for(cls))
            final = nv.double()
            with self._lock:
                self._dadd("guard_elements", cls, bad.sum().double())
        elif guard in ("nan_to_zero_clamp", "exponent_protection") and not is_float(t):
            with self._lock:  # FSDP2's uint8 all-gather: no float layout, delivered as flipped
                self._metrics.add("guard_skipped", cls, len(e_u))
        fin_b = torch.isfinite(before)
        dv = torch.where(fin_b, final - before, torch.zeros_like(before))  # a clean Inf/NaN is not the link's
        pert = (dv * dv).sum()
        # every element finite before is finite after, without a boolean-mask index (final[fin_b]):
        # a mask index sizes its result from the data, which reads the device on the host (a sync)
        pert = torch.where((torch.isfinite(final) | ~fin_b).all(), pert, torch.full_like(pert, math.inf))
        if x.is_cuda:
            self._dev_streams.add(torch.cuda.current_stream(x.device))
        with self._lock:
            m = self._metrics
            m.add("errors_injected", cls, len(idx))
            if n_prot:
                m.add("errors_protected", cls, n_prot)
            if measure:
                self._dadd("perturbation_sq", cls, pert)
            self._dadd("nonfinite_events", cls, (~torch.isfinite(after)).any().double())
            self._dev_log.append((seq, op, cls, src, hop, elem + elem_base, bit, offsets[idx], inv, before, after))

    def _receive(self, pending: tuple | None, cls: str, t: torch.Tensor, elem_base: int = 0,  # noqa: ARG002
                 vals: np.ndarray | None = None) -> None:
        if pending is not None:
            if vals is not None and not self.force_device_path:  # CPU fp32/fp64 seen through numpy
                self._apply_cpu_fused(pending, t, elem_base, vals)
            else:
                self._apply(pending, t, elem_base, vals)

    @staticmethod
    def _host_view(t: torch.Tensor) -> np.ndarray:
        """A CPU fp32/fp64 tensor's elements as a flat numpy view (no copy)."""
        return (t.detach() if t.requires_grad else t).numpy().reshape(-1)

    @staticmethod
    def _flat(t: torch.Tensor) -> torch.Tensor:
        if not t.is_contiguous():  # internal: callers stage non-contiguous tensors first
            raise ValueError(f"{BACKEND_NAME}: internal error: a non-contiguous tensor reached the receive path")
        return t.detach().view(-1)

    @staticmethod
    def _stage(t: torch.Tensor) -> torch.Tensor:
        """``t`` itself if contiguous, else a contiguous copy (the bytes a transport would carry)."""
        return t if t.is_contiguous() else t.detach().contiguous()

    @staticmethod
    def _unstage(t: torch.Tensor, buf: torch.Tensor) -> None:
        if buf is not t:
            t.detach().copy_(buf)
