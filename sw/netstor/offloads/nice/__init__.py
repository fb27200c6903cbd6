"""NICE: network-integrated key-value storage (Al-Kiswany et al., HPDC 2017), one folder.
Protocol: ``docs/nice.md``.

* :mod:`.header` -- the 26-byte header, declared once, and the key -> vnode -> subgroup ->
  partition rules.
"""
