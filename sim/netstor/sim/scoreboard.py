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
* **failures**: a received frame that matches no prediction of its output at or after its
  stream's position (corrupted, duplicated, reordered within a stream, or not predicted at
  all), and any difference between the scoreboard's drops and the counters.

Frames are matched byte for byte together with their ``tuser``. Frames must be distinct within
a stream for the match to be unambiguous (the soak pads every frame with random bytes).

Usage::

    sb = DropScoreboard(n_outputs)
    sb.predict(q, (inp, depth), frame, user)      # for every model output, in model order
    sb.receive(q, frame, user)                    # for every frame a sink got, in arrival order
    report = sb.check(hw_counters, model_counters)   # {'outputs': {...}, 'mismatches': [...]}
"""
from __future__ import annotations

from collections import defaultdict

__all__ = ["DropScoreboard"]


class DropScoreboard:
    def __init__(self, n_outputs, *, lookahead=4096):
        self.n_outputs = n_outputs
        self.lookahead = lookahead          # how far past a stream's position a match may lie
        self.pred = {q: defaultdict(list) for q in range(n_outputs)}   # q -> stream -> [(f, u)]
        self.got = {q: [] for q in range(n_outputs)}

    def predict(self, q, stream, frame, user):
        self.pred[q][stream].append((bytes(frame), int(user)))

    def receive(self, q, frame, user):
        self.got[q].append((bytes(frame), int(user)))

    def predicted(self, q):
        return sum(len(v) for v in self.pred[q].values())

    def match(self, q):
        """Match output ``q``'s received frames against its streams. Returns ``(received,
        dropped frames [(stream, frame, user)], unmatched [(index, frame, user)])``."""
        streams = self.pred[q]
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
            pos[s] = i + 1
            matched += 1
        for s, lst in streams.items():
            dropped += [(s, f, u) for f, u in lst[pos[s]:]]
        return matched, dropped, unmatched

    def check(self, hw, model):
        """Match every output and compare with the counters: ``hw`` and ``model`` map counter
        names (``out<q>.pkts``, ``out<q>.bytes``, ``out<q>.drop_full``) to values. Returns a
        report dict; ``report["mismatches"]`` lists every failure (empty: the outputs are
        exactly the predictions less the counted drops)."""
        out, bad = {}, []
        for q in range(self.n_outputs):
            matched, dropped, unmatched = self.match(q)
            pred = self.predicted(q)
            # the copy lane's stale copies (``out<q>.drop_stale``, never sent) are drops too
            stale_hw = hw.get(f"out{q}.drop_stale", 0)
            drop_hw = hw.get(f"out{q}.drop_full", 0) + stale_hw
            drop_bytes = sum(len(f) for _, f, _ in dropped)
            row = {"predicted": pred, "received": len(self.got[q]), "matched": matched,
                   "dropped_seen": len(dropped), "drop_full": drop_hw - stale_hw,
                   "drop_stale": stale_hw,
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
            if mb - hb != drop_bytes:
                bad.append(f"output {q}: model - hw out{q}.bytes = {mb - hb}, dropped frames "
                           f"{drop_bytes} bytes")
        return {"outputs": out, "mismatches": bad}
