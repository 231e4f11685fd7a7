package normalize

import "strings"

// Facets fills the request facets named by the hints from the validated
// arguments args, relative to the workspace ws.
func (h *NormalizationHints) Facets(args map[string]any, ws string, out *Normalized) *NormalizeError {
	str := func(name string) (string, bool, *NormalizeError) {
		v, ok := args[name]
		if !ok {
			return "", false, nil
		}
		s, ok := v.(string)
		if !ok {
			return "", false, Errorf(ReasonInvalidRequest, "argument %q must be a string", name)
		}
		if i := strings.IndexByte(s, 0); i >= 0 {
			return "", false, Errorf(ReasonInvalidEncoding, "argument %q: NUL at byte %d", name, i)
		}
		return s, true, nil
	}
	for _, ph := range h.Paths {
		p, ok, err := str(ph.Arg)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if err := pathFacets(ph.Access...)(map[string]string{"path": p}, ws, out); err != nil {
			return err
		}
	}
	if h.Command != "" {
		c, ok, err := str(h.Command)
		if err != nil {
			return err
		}
		if ok {
			if err := bashFacets(map[string]string{"command": c}, ws, out); err != nil {
				return err
			}
		}
	}
	if h.URL != "" {
		u, ok, err := str(h.URL)
		if err != nil {
			return err
		}
		if ok {
			if err := urlFacets(map[string]string{"url": u}, ws, out); err != nil {
				return err
			}
		}
	}
	if h.MCP != nil {
		m := map[string]string{}
		for k, arg := range map[string]string{"server": h.MCP.Server, "tool": h.MCP.Tool, "resource": h.MCP.Resource} {
			if arg == "" {
				continue
			}
			v, ok, err := str(arg)
			if err != nil {
				return err
			}
			if ok {
				m[k] = v
			}
		}
		if err := mcpFacets(m, ws, out); err != nil {
			return err
		}
	}
	return nil
}
