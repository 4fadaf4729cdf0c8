"""The report stage: a PDF validation report and its figures, drawn from stored results.

It reads ``evaluation.json``, ``calibration.json``, ``provenance.json`` and the protocol, and never
DICOM files, the model or the pipeline; it computes no statistic.

>>> from sitecal.report import ReportInputs, render_report   # doctest: +SKIP
>>> render_report(ReportInputs(evaluation, calibration, provenance, protocol), run_folder)  # doctest: +SKIP
"""

from __future__ import annotations

from ._inputs import ReportArtifacts, ReportInputs
from ._text import format_interval, format_value
from .monitoring import MonitoringArtifacts, render_monitoring
from .pdf import PAGE_SIZES, render_report

__all__ = [
    "PAGE_SIZES",
    "MonitoringArtifacts",
    "ReportArtifacts",
    "ReportInputs",
    "format_interval",
    "format_value",
    "render_monitoring",
    "render_report",
]
