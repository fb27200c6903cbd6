"""``make eval`` end to end at the smoke scale, platform section only: summary.json carries
the keys scripts read, with values from the runs (not placeholders), and report.md the
tables."""
from __future__ import annotations

import json

from netstor.evaluation.__main__ import main


def test_smoke_platform(tmp_path):
    assert main(["--out", str(tmp_path), "--scale", "smoke", "--only", "platform",
                 "--executor", "serial", "--no-progress"]) == 0
    s = json.loads((tmp_path / "summary.json").read_text())
    ms = s["platform"]["model_speed"]
    kinds = {"plain_request", "plain_reply", "netclone_request", "netclone_reply",
             "netrs_request", "netrs_response"}
    assert kinds <= set(ms["compiled_us"]) and kinds <= set(ms["interpreted_us"])
    assert all(ms["compiled_us"][k] < ms["interpreted_us"][k] for k in kinds)
    v = s["platform"]["validation"]
    assert v["compiled_packets_compared"] == 4 * 500 and v["compiled_mismatches"] == 0
    # 20,000 requests: within a few percent of Erlang C, and the value is a measured one
    assert 0 < abs(v["erlang_c_mean_err_pct"]) < 5
    assert v["rtl_replay_mismatches"] is None          # not run at the smoke scale
    assert s["meta"]["scale"] == "smoke" and s["meta"]["run_seconds"]
    md = (tmp_path / "report.md").read_text()
    assert "Erlang C" in md and "netrs_request" in md
