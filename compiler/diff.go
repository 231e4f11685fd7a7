package compiler

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/snapshot"
)

// Change is one permission that differs between two versions of a policy.
type Change struct {
	Policy string `json:"policy"`
	// Kind is "widened", "narrowed", "added" (a policy only in NEW),
	// "removed" (a policy only in OLD) or "renamed" (NEW's policy has the
	// policy_id of an OLD policy of another name; Path "name").
	Kind string `json:"kind"`
	// Path is the declaration path (the vocabulary of expansions).
	Path string `json:"path"`
	// Value is the pattern, mode, limit or rule id that changed.
	Value any `json:"value"`
	// Note qualifies the change, e.g. "deny removed".
	Note string `json:"note,omitempty"`
	// Approved is the NEW snapshot's expansion that authorizes a widening.
	Approved *snapshot.Expansion `json:"approved,omitempty"`
	// WithinParent names NEW's parent ("name@version") when the parent
	// already grants what widened: the policy relaxed a narrowing of its
	// own inside what its parent permits every descendant, which needs no
	// expansion (the compiler would call one unused) and is approved by
	// the parent's grant.
	WithinParent string `json:"within_parent,omitempty"`
}

// Unapproved reports whether c is a widening that neither an expansion nor
// NEW's parent approves.
func (c Change) Unapproved() bool {
	return c.Kind == "widened" && c.Approved == nil && c.WithinParent == ""
}

func (c Change) String() string {
	v, _ := json.Marshal(c.Value)
	s := fmt.Sprintf("%s: %s %s %s", c.Policy, c.Kind, c.Path, v)
	if c.Note != "" {
		s += " (" + c.Note + ")"
	}
	if c.Approved != nil {
		s += fmt.Sprintf(" [approved by %s: %s]", c.Approved.Authority, c.Approved.Evidence)
	} else if c.WithinParent != "" {
		s += fmt.Sprintf(" [within parent %s, which grants it]", c.WithinParent)
	}
	return s
}

// DiffSets compares two sets of snapshots policy by policy. A policy's
// identity is its policy_id (the executor's policy key, its budget account
// and its evidence go by it), so a NEW policy is compared with the OLD
// policy of the same policy_id, else with the OLD policy of the same name;
// a rename or a new policy_id is reported (Diff). A NEW policy's
// ancestors (for approvals) are found among new and extra, by the name and
// digest its lineage pins; extra are not compared themselves.
func DiffSets(old, new []*snapshot.Snapshot, extra ...*snapshot.Snapshot) []Change {
	pred := predecessors(old, new)
	matched := map[*snapshot.Snapshot]bool{}
	for _, o := range pred {
		matched[o] = true
	}
	byName := func(ss []*snapshot.Snapshot) map[string]*snapshot.Snapshot {
		m := map[string]*snapshot.Snapshot{}
		for _, s := range ss {
			m[s.Name] = s
		}
		return m
	}
	om, nm := byName(old), byName(new)
	var out []Change
	for _, name := range sortedKeys(om) {
		if !matched[om[name]] {
			out = append(out, Change{Policy: name, Kind: "removed", Path: "", Value: om[name].Digest})
		}
	}
	for _, name := range sortedKeys(nm) {
		o, ok := pred[nm[name]]
		if !ok {
			out = append(out, Change{Policy: name, Kind: "added", Path: "", Value: nm[name].Digest})
			continue
		}
		var ancestors []*snapshot.Snapshot
		for _, a := range nm[name].Lineage {
			if s, ok := nm[a.Name]; ok && s.Digest == a.Digest {
				ancestors = append(ancestors, s)
				continue
			}
			for _, s := range extra {
				if s.Name == a.Name && s.Digest == a.Digest {
					ancestors = append(ancestors, s)
					break
				}
			}
		}
		out = append(out, Diff(o, nm[name], ancestors...)...)
	}
	return out
}

// predecessors maps each NEW policy to the OLD policy it is a version of:
// the one with its policy_id, else (when no OLD policy has that id) the
// one with its name that no other NEW policy took by id. An id held by
// more than one policy on a side identifies none (the compiler refuses
// such a set; a directory of snapshot files may hold one), and the name
// decides.
// Predecessors pairs each NEW policy with the OLD policy DiffSets compares
// it with (the same policy_id, else the same name); NEW policies without
// one are absent.
func Predecessors(old, new []*snapshot.Snapshot) map[*snapshot.Snapshot]*snapshot.Snapshot {
	return predecessors(old, new)
}

func predecessors(old, new []*snapshot.Snapshot) map[*snapshot.Snapshot]*snapshot.Snapshot {
	count := func(ss []*snapshot.Snapshot) map[string]int {
		m := map[string]int{}
		for _, s := range ss {
			m[s.PolicyID]++
		}
		return m
	}
	oc, nc := count(old), count(new)
	oldByID, oldByName := map[string]*snapshot.Snapshot{}, map[string]*snapshot.Snapshot{}
	for _, o := range old {
		if oc[o.PolicyID] == 1 {
			oldByID[o.PolicyID] = o
		}
		oldByName[o.Name] = o
	}
	pred := map[*snapshot.Snapshot]*snapshot.Snapshot{}
	taken := map[*snapshot.Snapshot]bool{}
	for _, n := range new {
		if o, ok := oldByID[n.PolicyID]; ok && nc[n.PolicyID] == 1 {
			pred[n], taken[o] = o, true
		}
	}
	for _, n := range new {
		if _, ok := pred[n]; ok {
			continue
		}
		if o, ok := oldByName[n.Name]; ok && !taken[o] {
			pred[n], taken[o] = o, true
		}
	}
	return pred
}

// Diff lists every permission that widened or narrowed from old to new,
// deciding pattern coverage as conservatively as the compiler does, and
// marks widenings that the expansions recorded in new or in one of its
// ancestors (whose digests new's lineage pins) approve, and, when new's
// parent is among the ancestors and is the parent old had, those the
// parent already grants: a change that is no widening from the parent to
// new (WithinParent). It reports a change of name ("renamed"), of
// policy_id (a widening no expansion approves: the new id starts budgets
// and evidence afresh) and of parent (a widening of "extends", which an
// expansion of new naming the new parent approves); after a change of
// parent nothing is within parent: the new parent grants what widened only
// because the policy moved under it.
func Diff(old, new *snapshot.Snapshot, ancestors ...*snapshot.Snapshot) []Change {
	ids, moved := identityChanges(old, new)
	out := append(ids, diff(old, new, ancestors)...)
	if len(new.Lineage) == 0 || moved {
		return out
	}
	pa := new.Lineage[len(new.Lineage)-1]
	var parent *snapshot.Snapshot
	for _, a := range ancestors {
		if a.Name == pa.Name && a.Digest == pa.Digest {
			parent = a
		}
	}
	if parent == nil {
		return out
	}
	// What new has beyond its parent: any other widening from old stays
	// inside what the parent grants.
	beyond := map[string]bool{}
	for _, c := range diff(parent, new, nil) {
		if c.Kind == "widened" {
			beyond[c.Path+"\x00"+valueKey(c.Value)] = true
		}
	}
	for i := range out {
		c := &out[i]
		if c.Path != "uuid" && c.Path != "extends" && c.Unapproved() && !beyond[c.Path+"\x00"+valueKey(c.Value)] {
			c.WithinParent = parent.Name + "@" + parent.Version
		}
	}
	return out
}

// identityChanges reports a rename, a new policy_id and a new parent from
// old to new, and whether the parent changed (its name or policy_id, or
// new has one where old was a root). A policy that drops its parent
// becomes a root: nothing of it is within a parent any more, and every
// widening needs an expansion, so that alone is not reported.
func identityChanges(old, new *snapshot.Snapshot) (out []Change, moved bool) {
	if old.Name != new.Name {
		out = append(out, Change{Policy: new.Name, Kind: "renamed", Path: "name", Value: new.Name, Note: "was " + old.Name})
	}
	if old.PolicyID != new.PolicyID {
		out = append(out, Change{Policy: new.Name, Kind: "widened", Path: "uuid", Value: new.PolicyID,
			Note: "policy_id was " + old.PolicyID + ": budget usage and evidence start again under the new id"})
	}
	if len(new.Lineage) == 0 {
		return out, false
	}
	np := new.Lineage[len(new.Lineage)-1]
	var value any
	var note string
	switch {
	case len(old.Lineage) == 0:
		value, note = np.Name, "was a root policy"
	case old.Lineage[len(old.Lineage)-1].Name != np.Name:
		op := old.Lineage[len(old.Lineage)-1]
		value, note = np.Name, "parent was "+op.Name+"@"+op.Version
	case old.Lineage[len(old.Lineage)-1].PolicyID != np.PolicyID:
		value, note = np.PolicyID, "parent "+np.Name+" had policy_id "+old.Lineage[len(old.Lineage)-1].PolicyID
	default:
		return out, false
	}
	// Only new's own expansion approves the move: an ancestor's names its
	// own parent.
	c := Change{Policy: new.Name, Kind: "widened", Path: "extends", Value: value, Note: note,
		Approved: approvedBy([]*snapshot.Snapshot{new}, "extends", value)}
	return append(out, c), true
}

func diff(old, new *snapshot.Snapshot, ancestors []*snapshot.Snapshot) []Change {
	approvers := append([]*snapshot.Snapshot{new}, ancestors...)
	o, n := raise(old, nil), raise(new, nil)
	var out []Change
	// add returns the change it added, valid until the next add.
	add := func(kind, path string, value any, note string) *Change {
		c := Change{Policy: new.Name, Kind: kind, Path: path, Value: value, Note: note}
		if kind == "widened" && note == "" {
			c.Approved = approvedBy(approvers, path, value)
		}
		out = append(out, c)
		return &out[len(out)-1]
	}
	for f := range numFacets {
		spec := facets[f]
		if spec.deny {
			for _, p := range o.sets[f].sorted() {
				if n.sets[f][p] == nil {
					add("widened", spec.path, p, "deny removed")
				}
			}
			for _, p := range n.sets[f].sorted() {
				if o.sets[f][p] == nil {
					add("narrowed", spec.path, p, "deny added")
				}
			}
			continue
		}
		path := func(p string) (string, any) {
			if p == "*" && (f == fNetAllow || f == fSubAllow) {
				return strings.Split(spec.path, ".")[0] + ".mode", "allow"
			}
			return spec.path, p
		}
		oi, ni := newCoverIndex(spec.kind, o.sets[f]), newCoverIndex(spec.kind, n.sets[f])
		for _, p := range n.sets[f].sorted() {
			if !oi.covers(p) {
				pp, v := path(p)
				c := add("widened", pp, v, "")
				if c.Approved == nil && pp != spec.path {
					// A snapshot cannot tell mode "allow" from an
					// allowlist holding "*", and the compiler charges
					// the latter to the list (modeFacet).
					c.Approved = approvedBy(approvers, spec.path, p)
				}
			}
		}
		for _, p := range o.sets[f].sorted() {
			if !ni.covers(p) {
				pp, v := path(p)
				add("narrowed", pp, v, "")
			}
		}
	}
	if o.shell != n.shell && len(n.sets[fSubAllow]) > 0 {
		add(map[bool]string{true: "widened", false: "narrowed"}[n.shell == "allow"], "subprocess.shell", n.shell, "")
	}
	for _, k := range sortedKeys(o.approvals) {
		if n.approvals[k] == nil {
			add("widened", "actions.approve", k, "approval requirement removed")
		}
	}
	for _, k := range sortedKeys(n.approvals) {
		oa, na := o.approvals[k], n.approvals[k]
		switch {
		case oa == nil:
			if taken := rerouted(o.approvals, na); taken != "" {
				// A request escalates to one approver: the new rule may
				// take escalations old routed to another (as the
				// compiler's approverConflict).
				c := add("widened", "actions.approve", k, "approval requirement added; may take escalations of "+taken)
				c.Approved = approvedBy(approvers, "actions.approve", na.pattern)
				continue
			}
			add("narrowed", "actions.approve", k, "approval requirement added")
		case oa.expiresAfter != nil && na.expiresAfter != nil && *oa.expiresAfter != *na.expiresAfter:
			// An approval that stays valid longer permits more.
			note := fmt.Sprintf("expires_after %dµs → %dµs", *oa.expiresAfter, *na.expiresAfter)
			add(map[bool]string{true: "widened", false: "narrowed"}[*na.expiresAfter > *oa.expiresAfter], "actions.approve", k, note)
		}
	}
	// A dropped narrower secret entry is charged to the NEW grant that
	// widens it: that grant's recorded expansion approves it.
	diffSecrets(o, n, add, func(path string, value any) *snapshot.Expansion {
		return approvedBy(approvers, path, value)
	})
	for _, bf := range budgetFields {
		ob, nb := o.budgets[bf.kind], n.budgets[bf.kind]
		path := "budgets." + bf.kind
		switch {
		case ob != nil && nb == nil:
			add("widened", path, ob.limit, "limit removed")
		case ob == nil && nb != nil:
			add("narrowed", path, nb.limit, "limit added")
		case ob != nil && nb.limit > ob.limit:
			add("widened", path, nb.limit, "")
		case ob != nil && nb.limit < ob.limit:
			add("narrowed", path, nb.limit, "")
		}
	}
	if len(o.budgets) > 0 && len(n.budgets) > 0 && !windowEqual(o.window, n.window) {
		// Windows are aligned to the epoch: only a whole multiple of old's
		// window (or the lifetime) holds each of old's windows inside one
		// of its own; any other window lets the limits be spent twice in
		// one of old's windows (the compiler's rule for a child's window).
		within := o.window != nil && (n.window == nil || *n.window%*o.window == 0)
		c := add(map[bool]string{true: "narrowed", false: "widened"}[within], "budgets.window", windowValue(n.window), "")
		if !within && c.Approved == nil && n.window != nil {
			c.Approved = approvedWindow(approvers, *n.window)
		}
	}
	diffTime := func(path string, ot, nt *time.Time, laterWidens bool) {
		switch {
		case ot == nil && nt == nil:
		case ot != nil && nt == nil:
			add("widened", path, formatTime(*ot), path+" removed")
		case ot == nil:
			add("narrowed", path, formatTime(*nt), "")
		case nt.After(*ot):
			add(map[bool]string{true: "widened", false: "narrowed"}[laterWidens], path, formatTime(*nt), "")
		case nt.Before(*ot):
			add(map[bool]string{true: "narrowed", false: "widened"}[laterWidens], path, formatTime(*nt), "")
		}
	}
	diffTime("expires_at", o.expiresAt, n.expiresAt, true)
	diffTime("not_before", o.notBefore, n.notBefore, false)
	// A check applied at another level: each rule and each facet's "not
	// allowed" check (appliedChecks). A lower level widens, charged to the
	// NEW gate that applies the check; the note names the check.
	oc, oerr := appliedChecks(old)
	nc, nerr := appliedChecks(new)
	if err := errors.Join(oerr, nerr); err != nil {
		// Unreachable for parsed snapshots; fail closed.
		add("widened", "gates", "", "cannot attribute checks to gates: "+err.Error())
	}
	for _, check := range sortedKeys(nc) {
		pl, ok := oc[check]
		nl := nc[check]
		if !ok || pl.level == nl.level {
			continue
		}
		kind := "narrowed"
		if levelRank[nl.level] < levelRank[pl.level] {
			kind = "widened"
		}
		c := add(kind, "gates", nl.gate, fmt.Sprintf("%s: %s → %s", check, pl.level, nl.level))
		if kind == "widened" {
			c.Approved = approvedBy(approvers, "gates", nl.gate)
		}
	}
	return out
}

func approvedBy(snaps []*snapshot.Snapshot, path string, value any) *snapshot.Expansion {
	key := valueKey(value)
	for _, s := range snaps {
		for i, e := range s.Expansions {
			if e.Path != path {
				continue
			}
			for _, v := range e.Values {
				if valueKey(jsonValue(v)) == key {
					return &s.Expansions[i]
				}
			}
		}
	}
	return nil
}

// approvedWindow returns the expansion of budgets.window that names the
// window us, written as microseconds or as a duration (the compiler
// records the value as the author wrote it).
func approvedWindow(snaps []*snapshot.Snapshot, us int64) *snapshot.Expansion {
	for _, s := range snaps {
		for i, e := range s.Expansions {
			if e.Path != "budgets.window" {
				continue
			}
			for _, v := range e.Values {
				if n, ok := v.(int64); ok {
					v = json.Number(fmt.Sprint(n))
				}
				if w, _, err := windowMicroseconds(v); err == nil && w == us {
					return &s.Expansions[i]
				}
			}
		}
	}
	return nil
}

// rerouted names the approval rules of old that a may take escalations
// from: those with another approver whose pattern a may overlap, or "".
func rerouted(old map[string]*approval, a *approval) string {
	if a.approver == nil {
		return ""
	}
	var out []string
	for _, k := range sortedKeys(old) {
		oa := old[k]
		if oa.approver != nil && *oa.approver != *a.approver && approvalsOverlap(oa.pattern, a.pattern) {
			out = append(out, k)
		}
	}
	return strings.Join(out, ", ")
}

// diffSecrets compares exposures: a grant NEW has that OLD does not cover
// (at that exposure or above) widens; a forbid OLD had and NEW lacks widens.
//
// approval returns the expansion recorded in NEW or its ancestors that
// approves path and value, if any.
func diffSecrets(o, n *resolved, add func(kind, path string, value any, note string) *Change, approval func(path string, value any) *snapshot.Expansion) {
	covered := func(in *resolved, s *secret) bool { return grants(in.secrets, s) }
	for _, k := range sortedKeys(n.secrets) {
		s := n.secrets[k]
		if s.exposure == "forbid" {
			if o.secrets[k] == nil {
				add("narrowed", "secrets.forbid", s.namespace, "forbid added")
			}
		} else if !covered(o, s) {
			add("widened", "secrets."+s.exposure, s.namespace, "")
		}
	}
	for _, k := range sortedKeys(o.secrets) {
		s := o.secrets[k]
		if s.exposure == "forbid" {
			if n.secrets[k] == nil {
				add("widened", "secrets.forbid", s.namespace, "forbid removed")
			}
		} else if !covered(n, s) {
			add("narrowed", "secrets."+s.exposure, s.namespace, "")
		}
	}
	// The most restrictive matching entry wins: a narrower entry OLD had
	// inside a wider grant ("a/x: reference_only" in "a/*: inject") that
	// NEW drops widens its namespaces, though every NEW grant is covered
	// by OLD's (a NEW grant OLD does not cover is reported above).
	for _, k := range sortedKeys(o.secrets) {
		r := o.secrets[k]
		if r.exposure == "forbid" || restricts(n.secrets, r) {
			continue
		}
		// The compiler charges this widening to the grant g that overlaps r
		// (keepRestrictions), so an expansion declared for g approves it;
		// report one g, one without an approving expansion if there is one.
		var widener *secret
		var approved *snapshot.Expansion
		for _, gk := range sortedKeys(n.secrets) {
			g := n.secrets[gk]
			if g.exposure != "forbid" && exposureRank[g.exposure] > exposureRank[r.exposure] && covered(o, g) &&
				pattern.Overlaps(pattern.Namespace, g.namespace, r.namespace) {
				a := approval("secrets."+g.exposure, g.namespace)
				if widener == nil || a == nil {
					widener, approved = g, a
				}
				if a == nil {
					break
				}
			}
		}
		if widener != nil {
			add("widened", "secrets."+widener.exposure, r.namespace, "was "+r.exposure+" inside "+widener.namespace).Approved = approved
		}
	}
}

// grants reports whether an entry of secrets grants every namespace of s
// at s's exposure or above.
func grants(secrets map[string]*secret, s *secret) bool {
	for _, x := range secrets {
		if x.exposure != "forbid" && exposureRank[x.exposure] >= exposureRank[s.exposure] && coversNS(x.namespace, s.namespace) {
			return true
		}
	}
	return false
}

// restricts reports whether an entry of secrets keeps every namespace of
// s at s's exposure or below.
func restricts(secrets map[string]*secret, s *secret) bool {
	for _, x := range secrets {
		if exposureRank[x.exposure] <= exposureRank[s.exposure] && coversNS(x.namespace, s.namespace) {
			return true
		}
	}
	return false
}

func coversNS(parent, child string) bool { return pattern.Covers(pattern.Namespace, parent, child) }

func windowEqual(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func windowValue(w *int64) any {
	if w == nil {
		return "lifetime"
	}
	return *w
}

// jsonValue maps snapshot expansion values (float64 from encoding/json,
// json.Number, int64, string) to the forms valueKey compares.
func jsonValue(v any) any {
	switch v := v.(type) {
	case float64:
		return int64(v)
	case json.Number:
		return v
	}
	return v
}
