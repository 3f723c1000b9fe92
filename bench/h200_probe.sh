#!/usr/bin/env bash
# Run the agent on a real GPU for 60 s under a small PyTorch load; write results under $OUT.
#   OUT=/tmp/out bash bench/h200_probe.sh
# Needs: python3 with pydantic (+ pydantic-core, annotated-types, typing-extensions,
# typing-inspection), PyYAML and nvidia-ml-py importable (e.g. a carried wheel folder:
# WHEELS=dir installs them with --no-index); torch for the load (skipped without it).
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
export PYTHONPATH=.
PY=${PYTHON:-python3}
SUMMARY="$OUT/h200-summary.txt"
if [ -n "${WHEELS:-}" ]; then
  DEPS=${TMPDIR:-/tmp}/gpuwarden-pydeps
  $PY -m pip install --no-index --find-links "$WHEELS" --target "$DEPS" --quiet pydantic PyYAML nvidia-ml-py \
    >"$OUT/pip.log" 2>&1 || echo "pip from $WHEELS failed (see pip.log)" >>"$SUMMARY"
  export PYTHONPATH=.:$DEPS
fi
CFG="$OUT/agent.yaml"
cat >"$CFG" <<YAML
agent:
  fast_interval: 1s
  slow_interval: 15s
  socket_path: $OUT/agent.sock
spool:
  path: $OUT/spool.db
YAML
{
  echo "== h200 probe $(date -u +%FT%TZ)"
  $PY -c 'import sys; print("python", sys.version.split()[0])'
  nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader 2>&1 | head -8
} >>"$SUMMARY"

echo "== doctor" >>"$SUMMARY"
$PY -m gpuwarden.app.cli doctor --config "$CFG" >>"$SUMMARY" 2>&1
echo "doctor exit $?" >>"$SUMMARY"

LOAD=""
if $PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  (sleep 3; GPUWARDEN_SOCKET="$OUT/agent.sock" exec $PY bench/h200_load.py --seconds 50) >"$OUT/load.log" 2>&1 &
  LOAD=$!
else
  echo "no torch with CUDA: the agent runs without load" >>"$SUMMARY"
fi
# The agent in the foreground under a wrapper that reads its CPU time (user+system) from rusage.
$PY - "$CFG" "$OUT" >>"$SUMMARY" 2>&1 <<'PYEOF'
import resource, subprocess, sys, time
cfg, out = sys.argv[1], sys.argv[2]
t = time.monotonic()
with open(f"{out}/agent.stderr", "w") as err:
    rc = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", cfg, "--duration", "60s",
                         "--output", f"{out}/h200-agent.jsonl"], stderr=err).returncode
wall = time.monotonic() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = ru.ru_utime + ru.ru_stime
print(f"== agent exit {rc}; wall {wall:.1f} s; CPU user {ru.ru_utime:.3f} s + system {ru.ru_stime:.3f} s "
      f"= {cpu / wall * 100:.3f} % of one core (includes Python start-up and imports, ~0.3 s)")
PYEOF
[ -n "$LOAD" ] && wait "$LOAD"
tail -5 "$OUT/agent.stderr" >>"$SUMMARY"
cat "$OUT/load.log" >>"$SUMMARY" 2>/dev/null
[ -s "$OUT/h200-agent.jsonl" ] || { echo "no agent records (see above)"; echo "summary: $SUMMARY"; exit 1; } >>"$SUMMARY"
$PY - "$OUT/h200-agent.jsonl" >>"$SUMMARY" 2>&1 <<'PYEOF'
import collections, sys
from gpuwarden.contract import decode
recs = []
for line in open(sys.argv[1]):
    recs.append(decode(line))
kinds = collections.Counter(r.schema_ + (":" + str(r.kind) if hasattr(r, "kind") else "") for r in recs)
print("records", len(recs), dict(kinds))
snaps = [r for r in recs if r.schema_ == "node_snapshot/1"]
if snaps:
    g = snaps[-1].gpus[0]
    nulls = [k for k, v in g.model_dump().items() if v is None]
    print("last sample gpu0:", {k: v for k, v in g.model_dump().items() if v is not None})
    print("null (not supported) on gpu0:", nulls)
    print("max util", max(s.gpus[0].util_gpu or 0 for s in snaps), "max power", max(s.gpus[0].power_w or 0 for s in snaps))
    print("processes seen:", sorted({(p.pid, p.task, p.user) for s in snaps for p in s.processes}))
PYEOF
echo "summary: $SUMMARY"
