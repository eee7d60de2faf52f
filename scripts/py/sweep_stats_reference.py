"""Reference values for drmas sweep's statistics, from scipy (pinned in the test venv).

Reads JSON from stdin: {"quantiles": [[p, df], ...], "paired": [[a...], [b...]],
"samples": [[x...], ...]} and prints JSON: the t quantiles, the paired t-interval of
a − b (scipy.stats.ttest_rel's confidence interval), and each sample's mean with its
95 % t-interval (scipy.stats.t.interval).
"""
import json
import sys

import numpy as np
from scipy import stats

req = json.load(sys.stdin)
out = {"quantiles": [float(stats.t.ppf(p, df)) for p, df in req["quantiles"]]}
a, b = (np.asarray(x, dtype=float) for x in req["paired"])
ci = stats.ttest_rel(a, b).confidence_interval(0.95)
out["paired"] = [float((a - b).mean()), float(ci.low), float(ci.high)]
out["samples"] = []
for x in req["samples"]:
    x = np.asarray(x, dtype=float)
    low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    out["samples"].append([float(x.mean()), float(low), float(high)])
print(json.dumps(out))
