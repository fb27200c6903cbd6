"""The committed register page matches what the gateware generates."""
from netstor.build.docs import PAGE, render, current_schema


def test_register_page_is_current():
    assert PAGE.read_text() == render(current_schema()), (
        "docs/registers.md is stale: run `.venv/bin/python -m netstor.build.docs`")
