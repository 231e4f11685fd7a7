package compiler

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"cuelang.org/go/cue"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/normalize"
)

// TestCase is one declared decision test (`tests: [...]`).
type TestCase struct {
	// Index is the position in its source's tests list.
	Index int
	// Name is the optional name, for messages.
	Name string
	// Note says why the expected decision is right.
	Note string
	// Policy names the policy under test.
	Policy string
	// Request is the action request.
	Request normalize.ActionRequest
	// Want is the expected decision; nil members are not compared.
	Want TestWant
	// Pos is the position of the test.
	Pos diag.Pos
	// JSON is the test as authored, for polc export.
	JSON json.RawMessage
}

// TestWant is the expected part of a decision.
type TestWant struct {
	Disposition   string          `json:"disposition"`
	RuleIDs       *[]string       `json:"rule_ids,omitempty"`
	Reasons       *[]string       `json:"reasons,omitempty"`
	ApproverClass json.RawMessage `json:"approver_class,omitempty"`
}

// tests validates one `tests` list (tv) against #Test.
func (l *loader) tests(tv cue.Value) []*TestCase {
	var out []*TestCase
	l.eachListed(tv, "tests", l.tschema, nil, func(e listed) {
		var decoded struct {
			Name    string          `json:"name"`
			Note    string          `json:"note"`
			Policy  string          `json:"policy"`
			Request json.RawMessage `json:"request"`
			Want    TestWant        `json:"want"`
		}
		if err := unmarshalNumbers(e.raw, &decoded); err != nil {
			l.diags.Add(e.pos, diag.CodeSchemaViolation, "tests[%d]: %v", e.index, err)
			return
		}
		req, err := normalize.ParseActionRequest(decoded.Request)
		if err != nil {
			l.diags.Add(e.pos, diag.CodeSchemaViolation, "tests[%d]: %v", e.index, err)
			return
		}
		out = append(out, &TestCase{Index: e.index, Name: decoded.Name, Note: decoded.Note, Policy: decoded.Policy, Request: req, Want: decoded.Want, Pos: e.pos, JSON: e.raw})
	})
	return out
}

// Check returns "" when d has every member w gives, else what differs.
func (w TestWant) Check(d decision.Decision) string {
	var problems []string
	if w.Disposition != d.Disposition {
		problems = append(problems, fmt.Sprintf("want disposition %s, got %s (reasons: %s)", w.Disposition, d.Disposition, strings.Join(d.Reasons, ", ")))
	}
	if w.RuleIDs != nil && !sameSet(*w.RuleIDs, d.RuleIDs) {
		problems = append(problems, fmt.Sprintf("want rule_ids %q, got %q", *w.RuleIDs, d.RuleIDs))
	}
	if w.Reasons != nil && !sameSet(*w.Reasons, d.Reasons) {
		problems = append(problems, fmt.Sprintf("want reasons %q, got %q", *w.Reasons, d.Reasons))
	}
	if len(w.ApproverClass) > 0 {
		var want *string
		json.Unmarshal(w.ApproverClass, &want)
		if (want == nil) != (d.ApproverClass == nil) || (want != nil && *want != *d.ApproverClass) {
			got, _ := json.Marshal(d.ApproverClass)
			problems = append(problems, fmt.Sprintf("want approver_class %s, got %s", w.ApproverClass, got))
		}
	}
	return strings.Join(problems, "; ")
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
