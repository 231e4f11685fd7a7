package normalize

import ()

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
