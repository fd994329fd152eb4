"""The distribution's version, where any module can read it without importing the package root
(the public API, which imports everything)."""

__version__ = "0.1.0"
