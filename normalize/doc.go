// Package normalize turns a tool-action request into the normalized request
// that policies judge, or into a positioned refusal (*NormalizeError with a
// stable reason code): shell commands are parsed as bash reads them
// (shell.go, bash.go, shell_misread.go), paths are resolved against the
// workspace (path.go), URLs reduced to hosts (url.go) and MCP targets read
// (mcp.go). It has no policy and runs nothing: package decision decides a
// Normalized request, and package executor (stage 2 of its action plan)
// resolves the action's descriptor and calls into this package
// (docs/architecture.md).
package normalize
