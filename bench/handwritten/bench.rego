# A hand-written Rego of decision/bench_test.go's benchmark policy, as an
# author who knows OPA would write it: the same decision document as
# polc's bundle for the benchmark's requests, the same request check,
# each family of patterns an object keyed by the pattern's literal part
# (data.hand, written by the benchmark for each size) looked up once per
# request value, and no `with`. BenchmarkDecision checks that it decides
# every benchmark request as the native evaluator does; it is not a
# general polc policy (it knows only the shapes this policy has).
package handbench

import rego.v1

default decision := {
	"disposition": "deny", "rule_ids": [], "reasons": ["invalid_request"],
	"gates": [], "approver_class": null,
}

decision := d if {
	r := input.request
	is_string(r.principal)
	is_string(r.tenant)
	is_string(r.action)
	is_string(r.workspace)
	is_string(r.time)
	is_boolean(r.shell_control)
	is_array(r.paths)
	is_array(r.commands)
	is_array(r.hosts)
	is_array(r.env)
	is_array(r.secrets)
	count([1 | some p in r.paths; not is_string(p.path)]) == 0
	count([1 | some c in r.commands; some t in c; not is_string(t)]) == 0
	count([1 | some h in r.hosts; not is_string(h)]) == 0
	d := result
}

h := data.hand

# Grants, denials and approvals: [tag, rule id].
hits contains ["action", concat("", ["action.allow:", input.request.action])] if h.actions[input.request.action]

hits contains ["d", concat("", ["action.deny:bash:", argv[0], " danger *"])] if {
	lower(input.request.action) == "bash"
	some argv in input.request.commands
	lower(argv[1]) == "danger"
	h.deny_tools[lower(argv[0])]
}

hits contains ["a", "approval[release]:bash:git push *"] if {
	lower(input.request.action) == "bash"
	some argv in input.request.commands
	lower(argv[0]) == "git"
	lower(argv[1]) == "push"
}

hits contains ["c", i, concat("", ["subprocess.allow:", argv[0], " *"])] if {
	some i, argv in input.request.commands
	h.allow_tools[argv[0]]
}

hits contains ["c", i, "subprocess.allow:git *"] if {
	some i, argv in input.request.commands
	argv[0] == "git"
}

hits contains ["d", concat("", ["subprocess.deny:", argv[0], " rm *"])] if {
	some argv in input.request.commands
	lower(argv[1]) == "rm"
	h.deny_tools[lower(argv[0])]
}

hits contains ["p", i, concat("", ["filesystem.read:/repo/", m, "/**"])] if {
	some i, p in input.request.paths
	p.access == "read"
	parts := split(p.path, "/")
	parts[1] == "repo"
	m := parts[2]
	h.read_mods[m]
}

hits contains ["p", i, concat("", ["filesystem.write:/repo/", m, "/out/**"])] if {
	some i, p in input.request.paths
	p.access == "write"
	parts := split(p.path, "/")
	parts[1] == "repo"
	parts[3] == "out"
	m := parts[2]
	h.write_mods[m]
}

hits contains ["d", concat("", ["filesystem.deny:/repo/", m, "/**/.env"])] if {
	some p in input.request.paths
	parts := split(lower(p.path), "/")
	parts[1] == "repo"
	m := parts[2]
	h.deny_mods[m]
	parts[count(parts) - 1] == ".env"
}

hits contains ["h", i, concat("", ["network.allow:", v])] if {
	some i, v in input.request.hosts
	h.hosts[v]
}

hits contains ["h", i, concat("", ["network.allow:*.", s])] if {
	some i, v in input.request.hosts
	m := regex.find_all_string_submatch_n(`^(?:[^.:\[\]]+\.)+(svc[0-9]+\.internal):[0-9]+$`, v, 1)
	s := m[0][1]
	h.svcs[s]
}

hits contains ["d", concat("", ["network.deny:", hp])] if {
	some v in input.request.hosts
	hp := regex.find_all_string_submatch_n(`^(.*):[0-9]+$`, lower(v), 1)[0][1]
	h.bad_hosts[hp]
}

hits contains ["mcp_tool", concat("", ["mcp.tool:github/", op, "_*"])] if {
	input.request.mcp.server == "github"
	op := split(input.request.mcp.tool, "_")[0]
	h.ops[op]
}

hits contains ["d", concat("", ["mcp.deny:github/", op, "_*"])] if {
	lower(input.request.mcp.server) == "github"
	op := split(lower(input.request.mcp.tool), "_")[0]
	h.delete_ops[op]
}

# Facets without a grant.
na contains "principal" if not startswith(input.request.principal, "agent:")

na contains "tenant" if input.request.tenant != "acme"

na contains "action" if not h.actions[input.request.action]

na contains "command" if {
	some i, _ in input.request.commands
	count({1 | some ["c", i, _] in hits}) == 0
}

na contains f if {
	some i, p in input.request.paths
	count({1 | some ["p", i, _] in hits}) == 0
	f := concat("", ["path_", p.access])
}

na contains "host" if {
	some i, _ in input.request.hosts
	count({1 | some ["h", i, _] in hits}) == 0
}

na contains "mcp_tool" if {
	input.request.mcp != null
	count({1 | some ["mcp_tool", _] in hits}) == 0
}

na contains "shell" if input.request.shell_control

na contains "env" if count(input.request.env) > 0

na contains "secret" if count(input.request.secrets) > 0

grants := {id | some x in hits; x[0] in {"action", "mcp_tool"}; id := x[1]} | {id | some x in hits; x[0] in {"c", "p", "h"}; id := x[2]}

denied := {id | some ["d", id] in hits}

approvals := {id | some ["a", id] in hits}

result := {
	"disposition": "allow",
	"rule_ids": sort(grants),
	"reasons": ["allowed"],
	"gates": [
		{"gate_id": "polc.approval", "level": "soft", "decision": "allow", "reason_code": "allowed", "rule_ids": []},
		{"gate_id": "polc.default", "level": "hard", "decision": "allow", "reason_code": "allowed", "rule_ids": sort(grants)},
	],
	"approver_class": null,
} if {
	count(denied) + count(approvals) + count(na) < 1
}

result := {
	"disposition": "deny",
	"rule_ids": sort(denied),
	"reasons": sort({concat("", ["denied:", id]) | some id in denied} | {concat("", ["not_allowed:", f]) | some f in na}),
	"gates": [
		{"gate_id": "polc.approval", "level": "soft", "decision": "allow", "reason_code": "allowed", "rule_ids": []},
		{"gate_id": "polc.default", "level": "hard", "decision": "deny", "reason_code": code, "rule_ids": sort(denied | grants)},
	],
	"approver_class": null,
} if {
	count(denied) + count(na) > 0
	code := array.concat(["denied" | count(denied) > 0], [concat("", ["not_allowed:", f]) | f := sort(na)[0]])[0]
}
