#!/bin/sh
# attack4 repro (not run by tests): a governed harness plan accepts a
# session whose upstream MCP server program (here the script srv.py the
# server runs) lies in the agent's workspace, where polc's write_file
# rewrites it (see upstream_rewrite.sh for what follows: the agent's code
# runs as every allowed call of that server in the next run). The plan
# compares only session, snapshot, evidence, cert, sign_key and polc with
# the working dirs and write roots; tools.governed/v1 is still "enforced".
# Usage: sh governed_upstream.sh /path/to/polc
set -e
POLC=${1:-/tmp/atk4/polc}
R=$(mktemp -d); cd "$R"; mkdir ws
PATH=/root/.cache/polc/providers/bin:$PATH
"$POLC" keygen k -o keys >/dev/null
printf 'print("server")\n' > ws/srv.py
cat > session.yaml <<'EOS'
snapshot: out/snapshots/agent.json
profile: certifiable
workspace: ws
principal: agent:gov
tenant: acme
mcp_servers:
  srv: {command: ["/usr/bin/python3", "srv.py"]}
EOS
cat > policy.cue <<'EOS'
package p

policies: agent: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["write_file", "mcp"]
	filesystem: read: ["**"]
	filesystem: write: ["**"]
	mcp: servers: [{server: "srv", tools: ["ok"]}]
}
EOS
"$POLC" compile policy.cue -o out >/dev/null
cat > h.cue <<'EOS'
package h

harnesses: h: {
	provider: "claude-code"
	endpoint: base_url: "http://127.0.0.1:8080"
	workspace: root: "ws"
	governed: {session: "session.yaml", evidence: "ev", cert: "cert.json", sign_key: "keys/k.key"}
	allow_degraded: ["fs.write_roots/v1", "net.egress/v1", "config.isolation/v1"]
}
EOS
if "$POLC" harness plan h h.cue > plan.out 2>&1; then
	grep -E 'governed' plan.out | head -3
	echo "FAIL: the plan accepted a session whose MCP server program ws/srv.py the agent can rewrite"
	exit 1
fi
cat plan.out; echo ok
