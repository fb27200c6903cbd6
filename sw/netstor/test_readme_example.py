"""The README's program example runs: it builds a Pipeline, elaborates, and the model runs it."""
import re
from netstor.paths import repo_root

from netstor.lang import Pipeline

README = repo_root() / "README.md"


def test_readme_program_example():
    text = README.read_text()
    block = re.search(r"## Writing a program.*?```python\n(.*?)```", text, re.S).group(1)
    ns = {}
    exec(compile(block, "README.md", "exec"), ns)
    pl = Pipeline([ns["p"]])
    from netstor.gateware.csr import CsrBuilder
    from netstor.gateware.datapath import Datapath
    csr = CsrBuilder()
    dp = Datapath(pl, csr)
    assert {m.name for m in csr.memories} >= {"demo.counts", "demo.acl"}
    from netstor.model.dataplane import DataplaneModel
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw
    model = DataplaneModel(pl)
    frame = bytes(Ether() / IP(src="1.2.3.4") / UDP(sport=5, dport=7000) / Raw(bytes(10)))
    out1 = model.process(frame, 0)
    out2 = model.process(frame, 0)
    count = lambda f: int.from_bytes(f[44:48], "big")
    assert (count(out1[0].frame), count(out2[0].frame)) == (1, 2)
