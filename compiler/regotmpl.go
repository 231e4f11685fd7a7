package compiler

// Helpers of the generated policy modules, written only where a rule set
// needs them. Each is total: where a value has no such form it is null,
// which no rule's test takes for a string.

// relHelper: a path relative to the workspace ("" for the workspace
// itself), null for a path outside it.
const relHelper = `rel(ws, p) := "" if {
	p == ws
} else := substring(p, 1, -1) if {
	ws == "/"
} else := substring(p, count(ws) + 1, -1) if {
	startswith(p, concat("", [ws, "/"]))
} else := null

`

// hostHelpers: the host of "host:port" when the port is numeric (the
// text before the last ':'), else null; and its lowercase (lowercasing
// "host:port" lowercases its host and keeps the port).
const hostHelpers = `host_part(v) := m[0][1] if {
	m := regex.find_all_string_submatch_n("(?s)^(.*):[0-9]+$", v, 1)
	count(m) == 1
} else := null

lower_or_null(v) := lower(v) if is_string(v)
else := null

`

// mcpHelper: server/resource when the request names a resource, else
// null.
const mcpHelper = `mcp_resource(m) := concat("/", [m.server, m.resource]) if m.resource != null
else := null

`

// slashHelper: a value followed by '/', null for null.
const slashHelper = `slash(v) := concat("", [v, "/"]) if is_string(v)
else := null

`
