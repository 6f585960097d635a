"""pytest's hooks and fixtures only (helpers the tests import live in tests/support/): the slow tests first, the
learning figures at the end of every run, the ``make_config`` fixture, and the machine in pytest's header (CPU
model, cores, native bf16), so a CI log tells which machine kind it ran on."""

import pytest

from tests.support.runs import small_config


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` (minutes: the learning runs, the benchmark) go first: with ``make test``'s one test at a
    time per worker (``--maxschedchunk 1``) the two workers then start on the long ones and even out on the short."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: collection order otherwise


def pytest_terminal_summary(terminalreporter) -> None:
    """The learning tests' figures (``record_property("figures", ...)``), passed or not, at the end of every run."""
    figures = [
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", "") == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == "figures"
    ]
    if figures:
        terminalreporter.write_sep("-", "learning figures")
        for line in figures:
            terminalreporter.write_line(line)


def pytest_report_header(config) -> list[str]:
    from launch.machine import describe_machine
    from tests.support.machine import machine_line

    return [f"machine: {machine_line(describe_machine())}"]


@pytest.fixture
def make_config():
    return small_config
