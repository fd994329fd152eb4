"""The report: a results folder turned into one self-contained page a person reads."""

from interplay.report.label import add_label, read_label, write_label
from interplay.report.page import add_report, render, write_report

__all__ = ["add_label", "add_report", "read_label", "render", "write_label", "write_report"]
