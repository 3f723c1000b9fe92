#!/usr/bin/env bash
# The whole standalone pipeline on a real GPU: `gpuwarden run` (NVML → engine → alerts) for 140 s
# while a PyTorch job leaks GPU memory across checkpoints; then 30 s of the agent alone under
# cProfile and under rusage. Results under $OUT (8 files at most):
#   h200-live-input.jsonl   what the run sampled (--record), a replay fixture
#   h200-live-alerts.jsonl  the transitions it printed (--json)
#   h200-live-summary.txt   versions, load log, alert summary, agent CPU
#   agent-profile.txt       where the agent's main thread spends its time
# Usage: WHEELS=.cache/wheels OUT=/tmp/out bash bench/h200_live.sh
set -u
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH=.
if [ -n "${WHEELS:-}" ]; then
  DEPS=${TMPDIR:-/tmp}/gpuwarden-pydeps
  $PY -m pip install --no-index --find-links "$WHEELS" --target "$DEPS" --quiet pydantic PyYAML nvidia-ml-py \
    >/dev/null 2>&1 || echo "pip from $WHEELS failed" >>"$OUT/h200-live-summary.txt"
  export PYTHONPATH=.:$DEPS
fi
W=${TMPDIR:-/tmp}/gpuwarden-live
rm -rf "$W"; mkdir -p "$W"
CFG="$W/config.yaml"
{
  cat tests/fixtures/h200/live-leak.config.yaml
  printf 'agent:\n  node: h200-0\n  fast_interval: 1s\n  slow_interval: 15s\n  socket_path: %s/agent.sock\n' "$W"
  printf 'spool:\n  path: %s/spool.db\n' "$W"
} >"$CFG"
SUMMARY="$OUT/h200-live-summary.txt"
{
  echo "== h200 live $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
} >>"$SUMMARY"

# The leaking job starts after the run has a few clean samples: +32 MiB per 0.2 s step, checkpoints
# every 30 s that do not give the memory back.
(sleep 10; GPUWARDEN_TASK=h200-leak-probe GPUWARDEN_SOCKET="$W/agent.sock" \
  exec $PY bench/h200_load.py --seconds 110 --leak-mib-per-step 32 --checkpoint-every 30) >"$W/load.log" 2>&1 &
LOAD=$!
$PY -m gpuwarden.app.cli run --config "$CFG" --rules tests/fixtures/h200/live-leak.rules.yaml --json \
  --record "$OUT/h200-live-input.jsonl" --duration 140 >"$OUT/h200-live-alerts.jsonl" 2>"$W/run.stderr"
echo "run exit $?" >>"$SUMMARY"
wait "$LOAD"
{ echo "== load"; cat "$W/load.log"; echo "== run stderr"; tail -5 "$W/run.stderr"; } >>"$SUMMARY"
$PY - "$OUT/h200-live-alerts.jsonl" >>"$SUMMARY" 2>&1 <<'PYEOF'
import sys
from gpuwarden.contract import decode
for line in open(sys.argv[1]):
    t = decode(line)
    print("alert", t.ts, t.rule, t.tier, t.state, t.labels.get("gpu"), "|", t.summary[:160])
PYEOF

# The agent alone, no load: CPU per tick from rusage, then the same under cProfile.
$PY - "$CFG" >>"$SUMMARY" 2>&1 <<'PYEOF'
import resource, subprocess, sys
cfg = sys.argv[1]
def cpu(seconds):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", cfg, "--output",
                    "/dev/null", "--duration", str(seconds)], check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
short, long = cpu(5), cpu(35)
print(f"agent CPU: 5 s run {short:.3f} s, 35 s run {long:.3f} s; steady state "
      f"{(long - short) / 30 * 1000:.2f} ms CPU per 1 s tick")
PYEOF
$PY -m cProfile -o "$W/agent.prof" -m gpuwarden.app.cli agent --config "$CFG" --output /dev/null --duration 30 \
  2>>"$SUMMARY"
$PY - "$W/agent.prof" >"$OUT/agent-profile.txt" 2>&1 <<'PYEOF'
import pstats, sys
p = pstats.Stats(sys.argv[1])
p.sort_stats("tottime").print_stats(30)
p.sort_stats("cumulative").print_stats(30)
PYEOF
echo "summary: $SUMMARY"
