package executor

// EvaluateOwned exposes evaluateOwned to the external tests, with buffers
// of the given sizes (negative: nil).
func (p *Policy) EvaluateOwned(r *Normalized, gates, strs int) Decision {
	var gb []GateResult
	var sb []string
	if gates >= 0 {
		gb = make([]GateResult, gates)
	}
	if strs >= 0 {
		sb = make([]string, strs)
	}
	var d Decision
	p.evaluateOwned(r, &d, gb, sb)
	return d
}

// ShellBuiltinNames are the builtins shellBuiltins classifies.
func ShellBuiltinNames() []string {
	var names []string
	for name := range shellBuiltins {
		names = append(names, name)
	}
	return names
}

// IntegerVarNames are the variables integerVars lists.
func IntegerVarNames() []string {
	var names []string
	for name := range integerVars {
		names = append(names, name)
	}
	return names
}
