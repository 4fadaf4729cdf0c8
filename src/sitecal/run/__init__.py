"""The run layer: the stages, their composition into a run, and what works on a finished run folder.

- :func:`run_protocol` (and :func:`predict_protocol`, :func:`send_run`): the stages composed into one run
  that owns the run folder ``<output_dir>/<protocol name>-<UTC time>/`` and seals it;
- :mod:`sitecal.run.stages`: scan, predict, evaluate and render, each runnable alone;
- :mod:`sitecal.run.preflight`: what would refuse a run, found before the scan (``sitecal check``);
- :mod:`sitecal.run.sealed`: a finished run folder opened against its seal, with the run's site key;
- :mod:`sitecal.run.planning`: study-size planning (``sitecal plan``);
- :mod:`sitecal.run.apply`: a run's calibration applied to scores made elsewhere (``sitecal apply``);
- :mod:`sitecal.run.export`: a run's model and fits exported for deployment (``sitecal export``).

Only :mod:`sitecal.cli` and the notebook route (:mod:`sitecal.arrays`, which renders through the stages)
import this package.
"""

from __future__ import annotations

from sitecal.run._protocol_run import PredictResult, RunResult, predict_protocol, run_protocol
from sitecal.run._send import send_run

__all__ = ["PredictResult", "RunResult", "predict_protocol", "run_protocol", "send_run"]
