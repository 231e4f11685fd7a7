package pattern

import "testing"

// TestMCPResourceSegments: resources are matched as written, so a '.' or
// '..' segment matches only a resource naming its way around a directory,
// which a server may resolve elsewhere; empty segments are URIs' own.
func TestMCPResourceSegments(t *testing.T) {
	for _, p := range []string{"gh/..", "gh/../x", "gh/x/./y", "gh/x/..", "gh/./**", "fs/file:///tmp/../etc"} {
		if err := Validate(MCPResource, p); err == nil {
			t.Errorf("Validate(MCPResource, %q) = nil, want an error", p)
		}
	}
	for _, p := range []string{"fs/file:///tmp/**", "gh//abs", "gh/a//b", "gh/.x/..y/...", "gh/**"} {
		if err := Validate(MCPResource, p); err != nil {
			t.Errorf("Validate(MCPResource, %q) = %v, want nil", p, err)
		}
	}
}
