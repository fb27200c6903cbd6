"""A drop-aware, in-order scoreboard for the whole core's outputs.

The golden model predicts every output frame; the core's egress queues may drop whole copies
when an output is back-pressured (``out<q>.drop_full``), so an output receives a subsequence of
its predicted frames. What the scoreboard allows and what it rejects:

* **order**: frames that entered on one input and took the same number of recirculated passes
  (a *stream*, ``(input, depth)``) leave an output in the order they entered: the arbiter,
  the header path, the recirculation buffer and every egress queue are FIFOs, so only the
  interleaving of streams depends on arbitration. Each output's received frames must be an
  interleaving of in-order subsequences of its streams' predictions;
* **drops**: a predicted frame that was skipped over (a later frame of its stream arrived) or
  never arrived is a drop; per output their number must equal the hardware's
  ``out<q>.drop_full`` plus, on the copy-lane core, ``out<q>.drop_stale`` (a copy whose packet
  was overwritten in the lane's store before its turn) and their bytes the difference between the model's and the hardware's
  ``out<q>.bytes`` (the model has no queues: it counts every copy);
* **refused packets** (the copy lane's ``tm.overflow``: a packet whose descriptor found the
  replication engine's descriptor FIFO full makes no copy at all): when predictions name their
  packet (``predict(..., packet=k)``), a packet none of whose predicted copies arrived on any
  output is *whole-missing*; with ``tm.overflow`` = n > 0 there must be exactly n such packets,
  and their copies are the refused ones, subtracted before the per-output drop counts are
  compared. A packet that lost some copies but not all is never a refused one.
  :func:`engine_refusals` is the reference of which packets a burst loses this way;
* **failures**: a received frame that matches no prediction of its output at or after its
  stream's position (corrupted, duplicated, reordered within a stream, or not predicted at
  all), any difference between the scoreboard's drops and the counters, and a stale
  recirculation copy (``tm.recirc_stale`` > 0: the recirculated pass's outputs are missing on
  every output, which the scoreboard cannot attribute; it must be 0 wherever this
  scoreboard is used).

Frames are matched byte for byte together with their ``tuser``. Frames must be distinct within
a stream for the match to be unambiguous (the soak pads every frame with random bytes).

Usage::

    sb = DropScoreboard(n_outputs)
    sb.predict(q, (inp, depth), frame, user)      # for every model output, in model order
                                                  # (packet=k: the input packet it is a copy of)
    sb.receive(q, frame, user)                    # for every frame a sink got, in arrival order
    report = sb.check(hw_counters, model_counters)   # {'outputs': {...}, 'mismatches': [...]}
"""
from __future__ import annotations

from collections import defaultdict

__all__ = ["DropScoreboard", "engine_refusals"]


class DropScoreboard:
    def __init__(self, n_outputs, *, lookahead=4096):
        self.n_outputs = n_outputs
        self.lookahead = lookahead          # how far past a stream's position a match may lie
        self.pred = {q: defaultdict(list) for q in range(n_outputs)}   # q -> stream -> [(f, u)]
        self.got = {q: [] for q in range(n_outputs)}
        self.packet_of = {}                 # (q, stream, index) -> packet, when given
        self._dropped_at = {}               # q -> [(stream, index)] of each dropped prediction

    def predict(self, q, stream, frame, user, packet=None):
        lst = self.pred[q][stream]
        if packet is not None:
            self.packet_of[(q, stream, len(lst))] = packet
        lst.append((bytes(frame), int(user)))

    def receive(self, q, frame, user):
        self.got[q].append((bytes(frame), int(user)))

    def predicted(self, q):
        return sum(len(v) for v in self.pred[q].values())

    def match(self, q):
        """Match output ``q``'s received frames against its streams. Returns ``(received,
        dropped frames [(stream, frame, user)], unmatched [(index, frame, user)])``."""
        streams = self.pred[q]
        self._dropped_at[q] = []
        pos = {s: 0 for s in streams}
        # index of each (frame, user) in each stream: positions in increasing order
        where = defaultdict(list)
        for s, lst in streams.items():
            for i, fu in enumerate(lst):
                where[fu].append((s, i))
        dropped, unmatched, matched = [], [], 0
        for k, fu in enumerate(self.got[q]):
            best = None
            for s, i in where.get(fu, ()):
                if i >= pos[s] and i - pos[s] <= self.lookahead:
                    # the candidate that skips the fewest predictions
                    if best is None or i - pos[s] < best[1] - pos[best[0]]:
                        best = (s, i)
            if best is None:
                unmatched.append((k, fu[0], fu[1]))
                continue
            s, i = best
            dropped += [(s, f, u) for f, u in streams[s][pos[s]:i]]
            self._dropped_at[q] += [(s, j) for j in range(pos[s], i)]
            pos[s] = i + 1
            matched += 1
        for s, lst in streams.items():
            dropped += [(s, f, u) for f, u in lst[pos[s]:]]
            self._dropped_at[q] += [(s, j) for j in range(pos[s], len(lst))]
        return matched, dropped, unmatched

    def check(self, hw, model):
        """Match every output and compare with the counters: ``hw`` and ``model`` map counter
        names (``out<q>.pkts``, ``out<q>.bytes``, ``out<q>.drop_full``) to values. Returns a
        report dict; ``report["mismatches"]`` lists every failure (empty: the outputs are
        exactly the predictions less the counted drops)."""
        out, bad = {}, []
        results = {q: self.match(q) for q in range(self.n_outputs)}
        refused = self.refused_packets()
        overflow = hw.get("tm.overflow", 0)
        if overflow and len(refused) != overflow:
            bad.append(f"tm.overflow = {overflow} but {len(refused)} packets lost every copy"
                       + ("" if self.packet_of else " (predictions name no packet)"))
        if not overflow:
            refused = set()
        if hw.get("tm.recirc_stale", 0):
            bad.append(f"tm.recirc_stale = {hw['tm.recirc_stale']}: a recirculated pass lost "
                       "(its outputs cannot be attributed; must be 0)")
        for q in range(self.n_outputs):
            matched, dropped, unmatched = results[q]
            pred = self.predicted(q)
            # the copies of refused packets (``tm.overflow``) are not per-output drops
            ref = [k for k, (s, j) in enumerate(self._dropped_at[q])
                   if self.packet_of.get((q, s, j)) in refused]
            ref_bytes = sum(len(dropped[k][1]) for k in ref)
            dropped = [d for k, d in enumerate(dropped) if k not in set(ref)]
            # the copy lane's stale copies (``out<q>.drop_stale``, never sent) are drops too
            stale_hw = hw.get(f"out{q}.drop_stale", 0)
            drop_hw = hw.get(f"out{q}.drop_full", 0) + stale_hw
            drop_bytes = sum(len(f) for _, f, _ in dropped)
            row = {"predicted": pred, "received": len(self.got[q]), "matched": matched,
                   "dropped_seen": len(dropped), "drop_full": drop_hw - stale_hw,
                   "drop_stale": stale_hw, "refused": len(ref),
                   "unmatched": len(unmatched), "dropped_bytes": drop_bytes,
                   "streams": len(self.pred[q])}
            out[q] = row
            for k, f, u in unmatched[:5]:
                bad.append(f"output {q}: received frame #{k} (len {len(f)}, tuser {u:#x}) "
                           f"matches no prediction: {f[:64].hex()}")
            if unmatched[5:]:
                bad.append(f"output {q}: {len(unmatched) - 5} more unmatched frames")
            if len(dropped) != drop_hw:
                first = dropped[0] if dropped else None
                bad.append(f"output {q}: {len(dropped)} predicted frames missing but "
                           f"out{q}.drop_full = {drop_hw - stale_hw}"
                           + (f" + drop_stale = {stale_hw}" if stale_hw else "")
                           + (f" (first missing: stream {first[0]}, len {len(first[1])}, "
                              f"{first[1][:64].hex()})" if first else ""))
            if hw.get(f"out{q}.pkts", 0) != matched:
                bad.append(f"output {q}: out{q}.pkts = {hw.get(f'out{q}.pkts', 0)} but "
                           f"{matched} frames matched")
            if model.get(f"out{q}.pkts", 0) != pred:
                bad.append(f"output {q}: model out{q}.pkts = {model.get(f'out{q}.pkts', 0)} "
                           f"but {pred} predicted")
            hb, mb = hw.get(f"out{q}.bytes", 0), model.get(f"out{q}.bytes", 0)
            if mb - hb != drop_bytes + ref_bytes:
                bad.append(f"output {q}: model - hw out{q}.bytes = {mb - hb}, dropped frames "
                           f"{drop_bytes} bytes" + (f" + refused {ref_bytes}" if ref else ""))
        return {"outputs": out, "mismatches": bad, "refused_packets": sorted(refused)}

    def refused_packets(self):
        """Packets (as named by ``predict(..., packet=)``) that have predicted copies and none
        of them arrived on any output (call after :meth:`match` of every output)."""
        copies, lost = defaultdict(int), defaultdict(int)
        for (q, s, j), k in self.packet_of.items():
            copies[k] += 1
        for q, at in self._dropped_at.items():
            for s, j in at:
                k = self.packet_of.get((q, s, j))
                if k is not None:
                    lost[k] += 1
        return {k for k, n in copies.items() if lost[k] == n}


def engine_refusals(arrivals, copies, *, beats=1, fifo_depth=256, prefetch=4):
    """Reference: which descriptors the copy lane's replication engine refuses
    (``tm.overflow``) when group descriptors of ``copies`` copies of ``beats`` beats each
    arrive in the cycles ``arrivals`` (increasing; only their differences matter), nothing
    else in flight.

    The engine as documented (``ReplicationEngine``): a descriptor FIFO of ``fifo_depth``
    (a write finds it full when its registered level is ``fifo_depth``: refused); its head is
    issued to the group read when the read, landing and ``prefetch``-entry prefetch FIFO hold
    fewer than ``prefetch`` lists together (one cycle each for read and landing); a list
    loads from the prefetch FIFO into the current list when none is current or the current
    one's last copy leaves in that cycle; a copy leaves when the lane is free (``ReplicaLane``:
    a copy taken in cycle t reads its beats in t+1 .. t+beats, the next is taken in t+beats).
    Returns the indexes of the refused descriptors."""
    arrivals = list(arrivals)
    t0 = arrivals[0] if arrivals else 0
    at = {}
    for k, a in enumerate(arrivals):
        at.setdefault(a - t0, []).append(k)
    if any(len(v) > 1 for v in at.values()):
        raise ValueError("one descriptor per cycle")
    level = pending = landing = pf = cur = free_at = 0
    refused, left, t = [], len(arrivals), 0
    while left or level or pending or landing or pf or cur:
        k = at.get(t, [None])[0]
        accepted = False
        if k is not None:
            left -= 1
            if level < fifo_depth:
                accepted = True
            else:
                refused.append(k)
        issue = level > 0 and pf + pending + landing < prefetch
        step = cur > 0 and t >= free_at      # a copy leaves: the lane takes it
        if step:
            free_at = t + beats
        load = pf > 0 and (cur == 0 or (step and cur == 1))
        level += accepted - issue
        pf += landing - load
        landing, pending = pending, issue
        cur = copies if load else cur - step
        t += 1
    return refused
