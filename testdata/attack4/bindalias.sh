#!/bin/sh
# attack4 repro (not run by tests): the session's files are protected by
# path (protectGuard compares clean and symlink-resolved paths;
# Backend.Protect carves them out by path at spawn), but a mount can show
# the same directory under a second path that resolves to itself. A bind
# mount /tmp/.../alias of the session's directory (as containers, /home
# or /srv layouts often have) and a policy that grants the alias: polc's
# read_file returns the signer key and a landlock bash reads it and
# appends to the evidence chain. The agent cannot make the mount; the host
# has it. Run as root (it makes a private mount namespace with unshare -m).
# Usage: sh bindalias.sh /path/to/polc
set -e
POLC=${1:-/tmp/atk4/polc}
[ -n "$ATK4_INNER" ] || exec env ATK4_INNER=1 unshare -m --propagation private sh "$0" "$POLC"
R=$(mktemp -d); cd "$R"; mkdir ws alias
"$POLC" keygen k -o keys >/dev/null
mount --bind "$R" "$R/alias"
echo planted > ws/x
cat > session.yaml <<'EOS'
snapshot: out/snapshots/agent.json
profile: certifiable
workspace: ws
principal: agent:gov
tenant: acme
backend: landlock
EOS
cat > policy.cue <<EOS
package p

policies: agent: {
	version: "1"
	principals: ["agent:*"]
	tenants: ["acme"]
	actions: allow: ["read_file", "bash"]
	filesystem: read: ["**", "$R/alias/**"]
	filesystem: write: ["**", "$R/alias/**"]
	subprocess: {mode: "allowlist", allow: ["cat *", "ls *", "tee *"], shell: "forbid"}
}
EOS
"$POLC" compile policy.cue -o out >/dev/null
init='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}'
{ echo "$init"
  printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"read_file\",\"arguments\":{\"path\":\"$R/alias/keys/k.key\"}}}"
  printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"bash\",\"arguments\":{\"command\":\"cat $R/alias/keys/k.key\"}}}"
  printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"bash\",\"arguments\":{\"command\":\"ls $R/alias/ev\"}}}"
  printf '%s\n' "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"bash\",\"arguments\":{\"command\":\"tee $R/alias/ev/planted.jsonl\"}}}"
  sleep 6; } | "$POLC" mcp session.yaml --workspace "$R/ws" --evidence "$R/ev" --cert "$R/cert.json" --sign-key "$R/keys/k.key" --grace 5s 2>/dev/null > out.txt
for i in 2 3 4; do echo "== call $i:"; grep "\"id\":$i," out.txt | grep -o 'PRIVATE KEY-----[^"]\{0,30\}\|PRIVATE+KEY[^\\]\{0,30\}\|[0-9a-f-]\{36\}\.jsonl\|guard:protected_path\|Permission denied' | head -2; done
echo "== evidence dir: $(ls ev)"
if grep -q 'PRIVATE' out.txt || [ -e ev/planted.jsonl ]; then echo "FAIL: the signer key was read through a bind-mount alias"; exit 1; fi
echo ok
