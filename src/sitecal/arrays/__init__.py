"""The notebook route: arrays in, the same evaluation and report a run gives, out.

:func:`evaluate_arrays` takes a model's scores (logits or probabilities), labels, patient ids and subgroup
columns as arrays, and runs the evaluation of :func:`sitecal.evaluation.evaluate` on them: the seeded
patient-level split, one temperature per group of ``calibrate_by``, every metric before and after with
clustered, paired bootstrap intervals, disparities, acceptance verdicts. What it returns can be shown as a
table (:meth:`ArrayEvaluation.table`, a pandas DataFrame when pandas is installed) and rendered as the
same PDF report a run writes (:meth:`ArrayEvaluation.render`).

Like a run, it pools subgroup values of fewer than ``min_count_shown`` rows as ``other (n < k)``, and
never writes a patient id: patients are only used to keep a patient's studies together.

One answer per data set: the arrays are evaluated exactly as ``sitecal evaluate`` evaluates a predictions
file holding the same rows (the study ids in its key column, the patient ids in ``data.patient_column``,
the group columns, the same settings). Patients and studies are ordered by the split keys of their ids
(:mod:`sitecal._split_key`), as the command line orders them, so both draw the same split or folds and
the same resamples, and write the same numbers and verdict.
"""

from sitecal.arrays._evaluate import evaluate_arrays
from sitecal.arrays._result import ArrayEvaluation

__all__ = ["ArrayEvaluation", "evaluate_arrays"]
