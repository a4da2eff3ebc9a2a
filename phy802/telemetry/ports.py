"""A switch at a time: fit every port of a :class:`~phy802.telemetry.parsers.Telemetry`, rank the ports
worst first and format the table as text or CSV (``phy802 fec tail`` on a multi-port paste)."""

from __future__ import annotations

from typing import Callable

from phy802 import theory
from phy802.telemetry.fit import (CODES, FEC_OFF_MODES, fec_mode_mismatch, fit_histogram, fmt_interval, mark_fec_mismatch,
                                  mark_fec_off)

__all__ = ["fit_ports", "rank_ports", "ports_text", "ports_csv"]


def _fit_port(job):
    hist, code, kw = job
    return fit_histogram(hist, code, **kw)


def fit_ports(tel, code: theory.RsCode | str, *, workers: int = 1, progress: Callable[[str], None] | None = None,
              **kw) -> dict:
    """``{port: TailFit or None}`` (None: no codewords) for every port of a
    :class:`phy802.telemetry.parsers.Telemetry`; ``workers > 1`` fits ports in that many processes (the
    result does not depend on ``workers``: every port is fitted with the same arguments and seed).
    ``progress(port)`` is called as each port is done, and ``progress.close()`` (when it has one) at the
    end; a port whose active FEC mode is off gets :func:`mark_fec_off`, one whose mode is not ``code``
    (``LLRS`` fitted as kp4, ``BaseR``) :func:`mark_fec_mismatch`: withheld, ranked unknown."""
    cname = code if isinstance(code, str) else code.name
    names = [p.name for p in tel.ports]
    jobs = {p.name: (p.hist, code, kw) for p in tel.ports if p.hist.bins and p.hist.total > 0}
    out: dict = {n: None for n in names}
    if workers > 1 and len(jobs) > 1:
        import concurrent.futures as cf

        from phy802.runtime.workers import stop_pool, worker_pool

        with worker_pool(min(workers, len(jobs))) as ex:  # workers ignore Ctrl-C; this process stops them
            try:
                futs = {ex.submit(_fit_port, j): n for n, j in jobs.items()}
                for fut in cf.as_completed(futs):
                    out[futs[fut]] = fut.result()
                    if progress:
                        progress(futs[fut])
            except BaseException:
                stop_pool(ex)
                raise
    else:
        for n, j in jobs.items():
            out[n] = _fit_port(j)
            if progress:
                progress(n)
    if progress is not None and hasattr(progress, "close"):
        progress.close()
    for p in tel.ports:
        f = out[p.name]
        if f is not None:
            f.notes.extend(x for x in p.notes if x not in f.notes)
            if p.fec_mode is not None and p.fec_mode.lower() in FEC_OFF_MODES:
                mark_fec_off(f, p.fec_mode)
            elif cname in CODES and fec_mode_mismatch(p.fec_mode, cname):
                mark_fec_mismatch(f, p.fec_mode, fec_mode_mismatch(p.fec_mode, cname))
    return out


def rank_ports(tel, fits: dict) -> list[dict]:
    """One row per port, worst first, with its ``status``: ``below target`` (the best model's FER is at or
    above the target FER, margin < 1), then ``unknown`` (no law passes its goodness-of-fit test, or FEC is
    off: the tail is withheld and the verdict's message is the row's first note), then ``ok`` ranked by
    the best (AIC) model's margin factor (one the model never brings to the target last), then ``no data``
    (no codewords counted). An unknown port is never ranked with the healthy ones."""
    rows = []
    for p in tel.ports:
        f = fits.get(p.name)
        r: dict = {"port": p.name, "status": "no data", "codewords": p.hist.total if p.hist.bins else 0,
                   "model": None, "fer": None, "margin_factor": None, "margin_db": None, "snr_margin_db": None,
                   "pre_fec_ber": None,
                   "binomial_g2_p": None, "sonic_predicted_fer": None, "sonic_r2": None, "observed_flr": None,
                   "worst_lane": None, "notes": list(p.notes) if f is None else list(f.notes)}
        if f is None or f.best is None:
            r["notes"].append("no codewords counted" if f is None else "no model fitted")
            r["_key"] = (4, 0.0)
            rows.append(r)
            continue
        b = f.fits[f.best].predicted
        r.update(model=f.best, pre_fec_ber=b["pre_fec_ber"])
        if "binomial" in f.fits:
            r["binomial_g2_p"] = f.fits["binomial"].gof["g2_p"]
        if f.withheld:  # said first (fit_histogram / mark_fec_off put it first in the notes); nothing to rank by
            r.update(status="unknown")
            r["sonic_predicted_fer"] = f.baseline.get("predicted_fer")
            r["sonic_r2"] = f.baseline.get("r2")
            r["observed_flr"] = f.baseline.get("observed_flr")
            r["_key"] = (1, 0.0)
            rows.append(r)
            continue
        r.update(fer=b["fer"], margin_factor=b["margin_factor"], margin_db=b["margin_db"]["value"],
                 snr_margin_db=b["snr_margin_db"]["value"])
        r["sonic_predicted_fer"] = f.baseline.get("predicted_fer")
        r["sonic_r2"] = f.baseline.get("r2")
        r["observed_flr"] = f.baseline.get("observed_flr")
        if f.per_lane:
            lanes = [x for x in f.per_lane if x.get("codewords")]
            if lanes:
                w = max(lanes, key=lambda x: x["pre_fec_ber"]["value"])
                others = [x for x in lanes if x is not w]
                apart = bool(others) and all(w["pre_fec_ber"]["lo"] > x["pre_fec_ber"]["hi"] for x in others)
                r["worst_lane"] = {"lane": w["lane"], "pre_fec_ber": w["pre_fec_ber"], "separated": apart}
        m = b["margin_factor"]["value"]
        below = (b["fer"]["value"] or 0) >= f.target_fer or (m is not None and m < 1)
        r["status"] = "below target" if below else "ok"
        if below:
            r["_key"] = (0, 0.0 if m is None else m)
        else:
            r["_key"] = (2, m) if m is not None else (3, 0.0)
        rows.append(r)
    rows.sort(key=lambda r: r["_key"])
    for i, r in enumerate(rows, start=1):
        del r["_key"]
        r["rank"] = i
    return rows


def ports_text(rows: list[dict], target: float, fmt: str = "") -> str:
    """The switch table (worst port first)."""
    unknown = sum(r["status"] == "unknown" for r in rows)
    lines = [f"{len(rows)} ports ({fmt}), ranked by margin to FER {target:.0e} (worst first); model = best by AIC "
             "among the laws that pass their goodness-of-fit test"]
    if unknown:
        lines.insert(0, f"WARNING: {unknown} port(s) unknown: no law fits their histogram (or FEC is off); their "
                        "FER and margin are withheld and they are ranked after the ports below target, never as healthy")
    lines.append(f"{'#':>3} {'port':<14} {'status':<12} {'codewords':>10} {'model':<8} {'FER [95%]':<34} "
                 f"{'margin x [95%]':<30} {'dB SNR':>6} {'SONiC pred.':>11} {'R^2':>6}  note")
    for r in rows:
        if r["model"] is None or r["status"] == "unknown":
            sp = "-" if r["sonic_predicted_fer"] is None else f"{r['sonic_predicted_fer']:.2e}"
            r2 = "-" if r["sonic_r2"] is None else f"{r['sonic_r2']:.3f}"
            lines.append(f"{r['rank']:>3} {r['port']:<14} {r['status']:<12} {r['codewords']:>10.3g} "
                         f"{r['model'] or '-':<8} {'withheld' if r['model'] else '-':<34} "
                         f"{'withheld' if r['model'] else '-':<30} {'-':>6} {sp:>11} {r2:>6}  {'; '.join(r['notes'])}")
            continue
        fe, m = r["fer"], r["margin_factor"]
        ms = "-" if m["value"] is None else fmt_interval(m["value"], m["lo"], m["hi"])
        note = list(r["notes"])
        if r["binomial_g2_p"] is not None and r["binomial_g2_p"] < 1e-3:
            note.append("bursty (binomial rejected)")
        wl = r["worst_lane"]
        if wl and wl["separated"]:
            note.append(f"lane {wl['lane']} worst (BER {wl['pre_fec_ber']['value']:.2e})")
        sp = "-" if r["sonic_predicted_fer"] is None else f"{r['sonic_predicted_fer']:.2e}"
        r2 = "-" if r["sonic_r2"] is None else f"{r['sonic_r2']:.3f}"
        # the margin as the PAM4 AWGN SNR drop, as the one-port table gives it (10 log10 of the BER factor,
        # margin_db, is in the CSV and JSON: on this column it read as an SNR margin ten times too large)
        db = "-" if r["snr_margin_db"] is None else f"{r['snr_margin_db']:+.2f}"
        lines.append(f"{r['rank']:>3} {r['port']:<14} {r['status']:<12} {r['codewords']:>10.3g} {r['model']:<8} "
                     f"{fmt_interval(fe['value'], fe['lo'], fe['hi']):<34} {ms:<30} {db:>6} {sp:>11} {r2:>6}  "
                     f"{'; '.join(note)}")
    return "\n".join(lines)


def ports_csv(rows: list[dict]) -> str:
    """The switch table as CSV (one row per port, worst first)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["rank", "port", "status", "codewords", "model", "fer", "fer_lo", "fer_hi", "margin_factor", "margin_lo",
                "margin_hi", "margin_db", "snr_margin_db", "pre_fec_ber", "binomial_g2_p", "sonic_predicted_fer", "sonic_r2",
                "worst_lane", "notes"])
    g = lambda d, k: "" if d is None or d.get(k) is None else repr(float(d[k]))
    for r in rows:
        w.writerow([r["rank"], r["port"], r["status"], r["codewords"], r["model"] or "", g(r["fer"], "value"), g(r["fer"], "lo"),
                    g(r["fer"], "hi"), g(r["margin_factor"], "value"), g(r["margin_factor"], "lo"),
                    g(r["margin_factor"], "hi"), "" if r["margin_db"] is None else repr(r["margin_db"]),
                    "" if r["snr_margin_db"] is None else repr(r["snr_margin_db"]),
                    g(r["pre_fec_ber"], "value"), "" if r["binomial_g2_p"] is None else repr(r["binomial_g2_p"]),
                    "" if r["sonic_predicted_fer"] is None else repr(r["sonic_predicted_fer"]),
                    "" if r["sonic_r2"] is None else repr(r["sonic_r2"]),
                    "" if not r["worst_lane"] else r["worst_lane"]["lane"], "; ".join(r["notes"])])
    return buf.getvalue()
