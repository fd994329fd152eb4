"""The report: a results folder turned into one self-contained page a person reads."""

from interplay.report.page import add_report, render, write_report

__all__ = ["add_report", "render", "write_report"]
