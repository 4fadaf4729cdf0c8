"""Resampling intervals: a seeded, vectorised cluster / stratified bootstrap with percentile and BCa.

Resamples draw patients (clusters) with replacement within strata; each resample is a vector of
integer weights per cluster, and statistics are evaluated for a chunk of resamples at once.
"""

from __future__ import annotations

from sitecal.stats._bootstrap import Statistic, bootstrap_interval
from sitecal.stats._compare import COMPARED_METRICS, MethodComparison, compare_methods
from sitecal.stats._crossfit import CrossfitIntervals, crossfit_bootstrap
from sitecal.stats._disparity import DisparityResult, disparity_intervals, disparity_intervals_each
from sitecal.stats._disparity_flags import (
    GroupFlags,
    size_matched_flags,
    size_matched_flags_attributes,
    size_matched_flags_each,
)
from sitecal.stats._disparity_refit import (
    TemperatureFit,
    TemperatureReplicates,
    refit_disparity_intervals,
    refit_disparity_stages,
)
from sitecal.stats._disparity_refit_flags import refit_size_matched_flags
from sitecal.stats._empirical_bayes import GroupTemperatureIntervals, bootstrap_group_temperatures
from sitecal.stats._evaluators import PreparedStatistic, SufficientStatistic
from sitecal.stats._heterogeneity import RandomEffectsResult, random_effects_meta_analysis
from sitecal.stats._metric_intervals import DEFAULT_METRICS, MetricIntervals, bootstrap_metrics
from sitecal.stats._refit import RefitIntervals, bootstrap_temperature, fit_stream_seed, refit_bootstrap
from sitecal.stats._refit_method import MethodRefitIntervals, refit_method_bootstrap
from sitecal.stats._replicate_table import ReplicateTable
from sitecal.stats._sequential import (
    DEFAULT_BET_FRACTIONS,
    DEFAULT_TEMPERATURE_FACTORS,
    SideIncrements,
    alarm_threshold,
    bounded_mean_increments,
    changepoint_evalues,
    first_alarm,
    temperature_increments,
)
from sitecal.stats._spec import BootstrapResult, BootstrapSpec

__all__ = [
    "COMPARED_METRICS",
    "DEFAULT_BET_FRACTIONS",
    "DEFAULT_METRICS",
    "DEFAULT_TEMPERATURE_FACTORS",
    "BootstrapResult",
    "BootstrapSpec",
    "CrossfitIntervals",
    "DisparityResult",
    "GroupFlags",
    "GroupTemperatureIntervals",
    "MethodComparison",
    "MethodRefitIntervals",
    "MetricIntervals",
    "PreparedStatistic",
    "RandomEffectsResult",
    "RefitIntervals",
    "ReplicateTable",
    "SideIncrements",
    "Statistic",
    "SufficientStatistic",
    "TemperatureFit",
    "TemperatureReplicates",
    "alarm_threshold",
    "bootstrap_group_temperatures",
    "bootstrap_interval",
    "bootstrap_metrics",
    "bootstrap_temperature",
    "bounded_mean_increments",
    "changepoint_evalues",
    "compare_methods",
    "crossfit_bootstrap",
    "disparity_intervals",
    "disparity_intervals_each",
    "first_alarm",
    "fit_stream_seed",
    "random_effects_meta_analysis",
    "refit_bootstrap",
    "refit_disparity_intervals",
    "refit_disparity_stages",
    "refit_method_bootstrap",
    "refit_size_matched_flags",
    "size_matched_flags",
    "size_matched_flags_attributes",
    "size_matched_flags_each",
    "temperature_increments",
]
