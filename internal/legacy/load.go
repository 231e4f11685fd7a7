package legacy

import (
	"fmt"
	"strings"
)

// specKeys are the keys LionAGI's AgentSpec.from_yaml reads.
var specKeys = map[string]bool{"role": true, "modes": true, "model": true, "effort": true, "tools": true,
	"permissions": true, "pack": true, "system_prompt": true, "cwd": true, "yolo": true, "lion_system": true}

// permKeys are the keys of a permissions mapping polc reads (ask to
// refuse it with its reason).
var permKeys = map[string]bool{"mode": true, "allow": true, "deny": true, "escalate": true, "ask": true}

// Load reads a legacy permissions file as LionAGI reads it: with PyYAML's
// safe_load (YAML 1.1 scalar types, the last of a duplicated key), then
// from_dict and the canonical tool names of __post_init__ (Python's
// lowercase, aliases, the later of two spellings of one tool). The file
// holds an AgentSpec, whose permissions key is read, or the permissions
// value alone: a preset name or a {mode, allow, deny, escalate} mapping.
//
// It returns the policy and its findings: Invalid and Unrepresentable
// ones are errors (then the policy is not to be used), Overridden ones
// warn of rules LionAGI ignores, which the policy ignores too.
func Load(data []byte) (Policy, []*Error) {
	doc, errs := readPyYAML(data)
	if len(errs) > 0 {
		return Policy{}, errs
	}
	l := &loader{}
	p := l.top(doc)
	return p, l.errs
}

type loader struct{ errs []*Error }

func (l *loader) add(kind Kind, n *pyNode, path []string, format string, args ...any) {
	l.errs = append(l.errs, &Error{Kind: kind, Path: path, Line: n.line, Col: n.col, Msg: fmt.Sprintf(format, args...)})
}

// failed reports whether an error (not a warning) was found.
func (l *loader) failed() bool {
	for _, e := range l.errs {
		if e.Kind != Overridden {
			return true
		}
	}
	return false
}

const noPolicy = "LionAGI installs no permission policy (no hook: every tool call runs unchecked), so there is nothing to import; write allow_all to import that"

// top reads the document: an AgentSpec, or the permissions alone.
func (l *loader) top(v *pyNode) Policy {
	if v.typ != tDict {
		return l.permissions(v)
	}
	if e := v.get("permissions"); e != nil {
		l.rewritten(e)
		if e.val.typ == tNone {
			l.add(Invalid, e.key, []string{"permissions"}, "%s: %s", e.val.describe(), noPolicy)
			return Policy{}
		}
		return l.permissions(e.val)
	}
	var perm, spec *pyEntry
	for _, e := range v.entries {
		if e.key.typ != tStr {
			continue
		}
		if perm == nil && permKeys[e.key.text] {
			perm = e
		}
		if spec == nil && specKeys[e.key.text] {
			spec = e
		}
	}
	switch {
	case perm == nil:
		l.add(Invalid, v, nil, "no permissions: the file has no permissions key, nor mode, allow, deny or escalate; LionAGI reads it as an AgentSpec without permissions, for which %s", strings.Replace(noPolicy, "write allow_all", "write permissions: allow_all", 1))
		return Policy{}
	case spec != nil:
		l.add(Invalid, spec.key, []string{spec.key.text}, "%q is an AgentSpec key and %q a permissions key: LionAGI reads the file as an AgentSpec, finds no permissions key and installs no permission policy (every tool call runs unchecked), while the permissions alone would have no %q; move the rules under permissions:", spec.key.text, perm.key.text, spec.key.text)
		return Policy{}
	}
	return l.permissions(v)
}

// rewritten warns at each earlier assignment of a key written again.
func (l *loader) rewritten(e *pyEntry) {
	for _, k := range e.replaced {
		l.add(Overridden, k, []string{k.text},
			"written again at %d:%d: PyYAML keeps the last value, so LionAGI ignores this one, and so does the import", e.key.line, e.key.col)
	}
}

// permissions reads a permissions value (from_dict, or a preset).
func (l *loader) permissions(v *pyNode) Policy {
	switch v.typ {
	case tStr:
		return l.preset(v)
	case tNone:
		l.add(Invalid, v, nil, "%s: %s", v.describe(), noPolicy)
		return Policy{}
	case tDict:
	default:
		l.add(Invalid, v, nil, "want a preset name or a mapping, got %s (LionAGI fails on it)", v.describe())
		return Policy{}
	}
	p := Policy{Mode: "allow_all", keys: map[[2]string]Key{}, line: v.line, col: v.col} // from_dict's default mode
	for _, e := range v.entries {
		l.rewritten(e)
		k := e.key
		if k.typ != tStr {
			l.add(Invalid, k, []string{k.text}, "a key that is a %s: LionAGI's from_dict reads only its string keys and ignores this one: remove it", k.describe())
			continue
		}
		path := []string{k.text}
		switch k.text {
		case "mode":
			if e.val.typ != tStr {
				l.add(Invalid, e.val, path, "want a string, got %s", e.val.describe())
				continue
			}
			p.Mode = e.val.text
		case "allow", "deny", "escalate":
			m := l.rules(k.text, e.val, p.keys)
			switch k.text {
			case "allow":
				p.Allow = m
			case "deny":
				p.Deny = m
			default:
				p.Escalate = m
			}
		case "ask":
			l.add(Invalid, k, path, "the legacy engine has no ask map and ignored this key; escalate is its equivalent — rename it or remove it")
		default:
			l.add(Invalid, k, path, "unknown key (the legacy engine ignored it): remove it")
		}
	}
	if l.failed() {
		return Policy{}
	}
	return p
}

// preset resolves a preset name as _resolve_permissions does.
func (l *loader) preset(v *pyNode) Policy {
	name, ascii := asciiLower(v.text)
	// Python's str.lower maps no character outside ASCII to an ASCII
	// string but the Kelvin sign (to "k", in no preset's name), so a name
	// that is not ASCII is no preset (TestPythonLowercase).
	if ascii && name == "inherit" {
		l.add(Invalid, v, nil, `"inherit" is not a legacy preset (the legacy engine refused it too): in polc a policy inherits with extends: "<parent>" and leaves unset what it does not change`)
		return Policy{}
	}
	p, ok := Presets[name]
	if !ascii || !ok {
		l.add(Invalid, v, nil, "unknown permissions preset %q (valid: %s)", v.text, strings.Join(presetNames(), ", "))
		return Policy{}
	}
	p.Preset, p.line, p.col = v.text, v.line, v.col
	return p
}

// rules reads one of allow, deny, escalate: from_dict takes the value as
// is and __post_init__ rebuilds it as {canonical(k): v for k, v in
// value.items()}, so of two keys naming one tool the later in the dict
// wins (a key written twice holds the place of its first writing).
func (l *loader) rules(tier string, v *pyNode, keys map[[2]string]Key) map[string][]string {
	if v.typ != tDict {
		l.add(Invalid, v, []string{tier}, "want a map of tool to patterns, got %s (LionAGI fails to load it)", v.describe())
		return nil
	}
	type slot struct {
		key, val *pyNode
		ignored  []*pyNode
	}
	slots := map[string]*slot{}
	var order []string
	for _, e := range v.entries {
		k := e.key
		path := []string{tier, k.text}
		if k.typ != tStr {
			l.add(Invalid, k, path, "tool key %q is not a string: PyYAML (YAML 1.1) reads the plain %s as %s, and LionAGI lowercases every tool key with str.lower, so it cannot load the file; quote the key", k.text, k.text, map[pyType]string{tBool: "a bool", tInt: "an int", tFloat: "a float", tNone: "None", tDate: "a date", tDatetime: "a datetime"}[k.typ])
			continue
		}
		if _, ascii := asciiLower(k.text); !ascii {
			l.add(Unrepresentable, k, path, "tool key %q is not ASCII: LionAGI lowercases it with Python's str.lower, whose result polc does not reproduce for every character and Python version (Python lowers İ to i̇, Go to i)", k.text)
			continue
		}
		t := Canonical(k.text)
		s := slots[t]
		if s == nil {
			s = &slot{}
			slots[t] = s
			order = append(order, t)
		} else {
			s.ignored = append(s.ignored, s.key)
		}
		s.ignored = append(s.ignored, e.replaced...)
		s.key, s.val = k, e.val
	}
	out := map[string][]string{}
	for _, t := range order {
		s := slots[t]
		for _, k := range s.ignored {
			l.add(Overridden, k, []string{tier, k.text}, "LionAGI keeps one %s list per tool, and for tool %q the one of %s at %d:%d: it ignores this one, and so does the import", tier, t, s.key.text, s.key.line, s.key.col)
		}
		path := []string{tier, s.key.text}
		keys[[2]string{tier, t}] = Key{Name: s.key.text, Line: s.key.line, Col: s.key.col}
		if s.val.typ != tList {
			l.add(Invalid, s.val, path, "want a list of patterns, got %s (the legacy engine fails on it)", s.val.describe())
			continue
		}
		out[t] = []string{}
		for i, item := range s.val.items {
			if item.typ != tStr {
				l.add(Invalid, item, append(path, fmt.Sprint(i)), "want a string pattern, got %s (the legacy engine fails on it)", item.describe())
				continue
			}
			out[t] = append(out[t], item.text)
		}
	}
	return out
}

// asciiLower is Python's str.lower for an ASCII string, and whether s
// is one. (Outside ASCII Go's and Python's lowercase differ: Go maps
// U+0130 to "i", Python to "i̇", and the Unicode versions differ.)
func asciiLower(s string) (string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return s, false
		}
	}
	return strings.ToLower(s), true
}
