package normalize

// NormalizationHints map arguments to request facets (stage 2).
type NormalizationHints struct {
	// Paths are path arguments and the accesses each implies.
	Paths []PathHint `json:"paths"`
	// Command is a shell command argument, parsed into argv lists.
	Command string `json:"command"`
	// URL is a URL argument, normalized to host:port.
	URL string `json:"url"`
	// MCP names the server, tool and resource arguments.
	MCP *MCPHint `json:"mcp"`
}

// PathHint is a path argument and its accesses ("read", "write", "execute").
type PathHint struct {
	Arg    string   `json:"arg"`
	Access []string `json:"access"`
}

// MCPHint names the arguments of an MCP call.
type MCPHint struct {
	Server   string `json:"server"`
	Tool     string `json:"tool"`
	Resource string `json:"resource"`
}
