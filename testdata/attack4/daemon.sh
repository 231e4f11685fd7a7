#!/bin/sh
# attack4 repro (not run by tests): under the landlock backend (the one a
# governed harness run forces) a bash call can leave a daemon (setsid,
# streams on /dev/null) that outlives the call AND the session: it writes
# to the workspace after the certificate was written, an action that no
# evidence record covers. The landlock sandbox has no PID namespace or
# cgroup, and endSession kills only the call's session id.
# Usage: sh daemon.sh /path/to/polc   (go build -o /tmp/atk4/ ./cmd/polc ./cmd/polc-sandbox)
set -e
POLC=${1:-/tmp/atk4/polc}
R=$(mktemp -d); cd "$R"; mkdir ws
"$POLC" keygen k -o keys >/dev/null
cat > session.yaml <<'EOS'
snapshot: out/snapshots/agent.json
profile: certifiable
workspace: ws
principal: agent:gov
tenant: acme
backend: landlock
EOS
cat > policy.cue <<'EOS'
package p

policies: agent: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["bash"]
	filesystem: read: ["**"]
	filesystem: write: ["**"]
	subprocess: {mode: "allowlist", allow: ["setsid *", "sh *"], shell: "allow"}
}
EOS
"$POLC" compile policy.cue -o out >/dev/null
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}'
call='{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"setsid sh -c \"sleep 4; echo written-after-the-certificate > late.txt\" </dev/null >/dev/null 2>&1 &"}}}'
{ echo "$init"; echo "$call"; sleep 2; } | "$POLC" mcp session.yaml --backend landlock --workspace "$R/ws" --evidence "$R/ev" --cert "$R/cert.json" --sign-key "$R/keys/k.key" --grace 5s 2>&1 | grep -o '"isError":[a-z]*\|"kind[^,]*' | head -3
echo "== session closed; certificate: $(ls cert.json 2>/dev/null)  late.txt now: $(ls ws)"
echo "== surviving processes:"; ps -eo pid,sid,args | grep '[s]leep 4' || true
sleep 4
echo "== 4 s later, ws holds: $(ls ws)"; cat ws/late.txt 2>/dev/null && echo "FAIL: a daemon of the agent wrote after the session's certificate" && exit 1
echo ok
