"""The simulator's M/M/c server against Erlang C: mean and p99 of the response time within
2 % (fixed seed; 250k requests at rho 0.5: across seeds the errors spread by about +-0.4 %)."""
from netstor.cluster.validate import mmc_check, mmc_rack_check


def test_mmc_against_erlang_c():
    r = mmc_check(c=4, rho=0.5, mean_us=25.0, requests=250_000, seed=0)
    print(r)
    assert r["timeouts"] == 0 and r["measured"] > 200_000
    assert abs(r["mean_err_pct"]) < 2.0
    assert abs(r["p99_err_pct"]) < 2.0


def test_mmc_through_the_rack_switch_against_erlang_c():
    """The same queue behind the model switch: latency minus the fixed network part (cables,
    two passes of beats + 45 cycles, serialisation) is the M/M/c response time; the fastest
    request took exactly the fixed part plus its service."""
    r = mmc_rack_check(c=4, rho=0.5, mean_us=25.0, requests=150_000, seed=0)
    print(r)
    assert r["timeouts"] == 0 and r["min_latency_ns"] >= r["network_fixed_ns"]
    assert abs(r["mean_err_pct"]) < 2.0
    assert abs(r["p99_err_pct"]) < 2.0
