import json

from netstor.offloads.netrs.bench import main


def test_bench_small(tmp_path, capsys):
    out = tmp_path / "placement.json"
    assert main(["--k", "4", "--out", str(out), "--ilp-time-limit", "20"]) == 0
    doc = json.loads(out.read_text())
    (r,) = doc["results"]
    assert r["k"] == 4 and r["hosts"] == 16
    assert r["ilp"]["optimal"] and r["ilp"]["feasible"] and r["heuristic"]["feasible"]
    assert r["optimum"]["proven"]
    assert r["heuristic"]["rsnodes"] >= r["ilp"]["rsnodes"] == r["optimum"]["rsnodes"]
    assert r["aggregated"]["lower_bound"] <= r["ilp"]["rsnodes"]
    assert r["failure"]["feasible"]
    assert "k hosts" in capsys.readouterr().out
