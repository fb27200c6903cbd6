"""``python -m netstor.build rtl --out DIR``."""
from netstor.build import main

main()
