#!/usr/bin/env bash
# A sweep outlives one machine: the small files of its evaluated runs (metrics.jsonl
# gzipped, eval-final.json, experiment.toml, run.json — what `drmas sweep` reads to know
# a run is done and to report it; ~30 KB a run) are kept in the repository under
# docs/results/sweeps/<name>/, and put back into runs/sweeps/<name>/ on another
# checkout, so `drmas sweep` resumes with the runs not yet done. Checkpoints are not
# kept (gigabytes; an evaluated run needs none).
#   scripts/sweep-keep.sh save NAME      # runs/sweeps/NAME -> docs/results/sweeps/NAME
#   scripts/sweep-keep.sh restore NAME   # the other way, for runs not already there
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -eq 2 ] || { echo "usage: $0 save|restore SWEEP_NAME" >&2; exit 2; }
what=$1 name=$2
runs=runs/sweeps/$name
kept=docs/results/sweeps/$name
case "$what" in
  save)
    [ -d "$runs" ] || { echo "sweep-keep: no $runs" >&2; exit 1; }
    n=0
    for eval in "$runs"/*/seed-*/eval-final.json; do
      [ -f "$eval" ] || continue
      run=$(dirname "$eval")
      rel=${run#"$runs"/}
      # Whole or absent: written beside it under a name the globs here skip, then
      # swapped in (an interrupted save leaves the previous copy or none).
      part="$kept/$(dirname "$rel")/.$(basename "$rel").part"
      rm -rf "$part"
      mkdir -p "$part"
      cp "$run/eval-final.json" "$run/experiment.toml" "$run/run.json" "$part/"
      gzip -9nc "$run/metrics.jsonl" > "$part/metrics.jsonl.gz"
      sync "$part"/*
      rm -rf "${kept:?}/$rel"
      mv "$part" "$kept/$rel"
      n=$((n + 1))
    done
    echo "sweep-keep: $n evaluated runs of $name kept in $kept"
    ;;
  restore)
    [ -d "$kept" ] || { echo "sweep-keep: nothing kept for $name ($kept)"; exit 0; }
    n=0
    for eval in "$kept"/*/seed-*/eval-final.json; do
      [ -f "$eval" ] || continue
      src=$(dirname "$eval")
      rel=${src#"$kept"/}
      dst=$runs/$rel
      # A run already here (done or under way) is left as it is.
      [ -e "$dst" ] && continue
      part="$(dirname "$dst")/.$(basename "$dst").part"
      rm -rf "$part"
      mkdir -p "$part"
      cp "$src/experiment.toml" "$src/run.json" "$src/eval-final.json" "$part/"
      gzip -dc "$src/metrics.jsonl.gz" > "$part/metrics.jsonl"
      sync "$part"/*
      mv "$part" "$dst"
      n=$((n + 1))
    done
    echo "sweep-keep: $n runs of $name restored into $runs"
    ;;
  *) echo "usage: $0 save|restore SWEEP_NAME" >&2; exit 2 ;;
esac
