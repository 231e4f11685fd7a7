package compiler

// Helpers of the generated policy modules, written only where a rule set
// needs them: the value objects each list element's rules are evaluated
// with (`with input as` the object).

// pathHelpers: a path (v, lowercased l), its access (x), the action (la)
// and, for a path in the workspace, the path relative to it (r, lr).
const pathHelpers = `path_in(p, x, ws, la) := {"v": p, "l": l, "x": x, "la": la, "r": r, "lr": lr} if {
	l := lower(p)
	r := rel(ws, p)
	lr := rel(lower(ws), l)
} else := {"v": p, "l": l, "x": x, "la": la, "r": r} if {
	l := lower(p)
	r := rel(ws, p)
} else := {"v": p, "l": l, "x": x, "la": la, "lr": lr} if {
	l := lower(p)
	lr := rel(lower(ws), l)
} else := {"v": p, "l": lower(p), "x": x, "la": la}

rel(ws, p) := "" if {
	p == ws
} else := substring(p, 1, -1) if {
	ws == "/"
} else := substring(p, count(ws) + 1, -1) if {
	startswith(p, concat("", [ws, "/"]))
}

`

// hostHelpers: "host:port" (v, l), the action (la) and, when the port is
// numeric, the host without it (h, lh).
const hostHelpers = `host_in(v, la) := {"v": v, "l": l, "la": la, "h": h, "lh": lh} if {
	l := lower(v)
	h := host_part(v)
	lh := host_part(l)
} else := {"v": v, "l": lower(v), "la": la}

host_part(v) := m[0][1] if m := regex.find_all_string_submatch_n("(?s)^(.*):[0-9]+$", v, 1)

`

// mcpHelpers: server/tool (m, lm), the action (la) and server/resource
// (r) when the request names a resource.
const mcpHelpers = `mcp_in(m, la) := {"m": v, "lm": lower(v), "la": la} if {
	m.resource == null
	v := concat("/", [m.server, m.tool])
} else := {"m": v, "lm": lower(v), "la": la, "r": concat("/", [m.server, m.resource])} if {
	v := concat("/", [m.server, m.tool])
}

`
