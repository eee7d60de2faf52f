"""Reads back what drmas sent to an MLflow server, through MLflow's own client, and
prints it as JSON: each run of the experiment with its status, tags, params, the
history (steps) of a few metrics, and its artifacts under `samples/`.

    python mlflow_check.py URI EXPERIMENT METRIC...
"""

import json
import sys

from mlflow.tracking import MlflowClient


def main():
    uri, name, metrics = sys.argv[1], sys.argv[2], sys.argv[3:]
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(name)
    runs = []
    for run in client.search_runs([exp.experiment_id]):
        rid = run.info.run_id
        history = {
            m: [[h.step, h.value] for h in client.get_metric_history(rid, m)] for m in metrics
        }
        artifacts = [a.path for a in client.list_artifacts(rid, "samples")]
        runs.append(
            {
                "run_id": rid,
                "status": run.info.status,
                "tags": {k: v for k, v in run.data.tags.items() if k.startswith(("drmas.", "mlflow.source.git"))},
                "params": run.data.params,
                "metric_keys": len(run.data.metrics),
                "history": history,
                "artifacts": artifacts,
            }
        )
    print(json.dumps({"experiment_id": exp.experiment_id, "runs": runs}))


if __name__ == "__main__":
    main()
