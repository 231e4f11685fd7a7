package compiler

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"polc.dev/polc/decision"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/pattern"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

// policyNamespace is the UUIDv5 namespace of derived policy ids:
// UUIDv5(NameSpaceURL, "https://polc.dev/ns/policy").
var policyNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://polc.dev/ns/policy"))

// DerivedPolicyID returns the policy_id of a policy that declares no uuid:
// the UUIDv5 of its name in polc's policy namespace.
func DerivedPolicyID(name string) string {
	return uuid.NewSHA1(policyNamespace, []byte(name)).String()
}

// resolver resolves one policy declaration against its parent.
type resolver struct {
	cfg        Config
	p          *Policy
	d          *PolicyDecl
	parent     *resolved // nil for a root policy
	parentName string
	out        *resolved
	auth       *expansionAuth
	diags      diag.List
}

// resolve applies inheritance (docs/composition.md) to p against parent
// (nil: p is a root).
func resolve(cfg Config, p *Policy, parent *resolved) (*resolved, *expansionAuth, diag.List) {
	r := &resolver{cfg: cfg, p: p, d: &p.Decl, parent: parent, auth: newExpansionAuth(p)}
	if parent == nil {
		r.out = rootDefaults()
	} else {
		r.out = parent.inherit()
		r.parentName = parent.name
	}
	r.identity()
	r.parentExpansion()
	for f := range numFacets {
		spec := facets[f]
		if spec.decl == nil {
			continue
		}
		if spec.deny {
			r.denyFacet(f, spec.decl(r.d))
		} else {
			r.allowFacet(f, spec.decl(r.d), spec.path)
		}
	}
	var netMode, subMode *string
	var netList, subList *[]string
	if n := r.d.Network; n != nil {
		netMode, netList = n.Mode, n.Allow
	}
	if s := r.d.Subprocess; s != nil {
		subMode, subList = s.Mode, s.Allow
	}
	r.modeFacet(fNetAllow, "network", netMode, netList, &r.out.netMode, &r.out.netList)
	r.modeFacet(fSubAllow, "subprocess", subMode, subList, &r.out.subMode, &r.out.subList)
	r.shell()
	r.mcpServers()
	r.approvals()
	r.secrets()
	r.budgets()
	r.expiry()
	r.gates()
	r.shadowed()
	return r.out, r.auth, r.diags
}

// policyID is the policy_id p compiles to: its uuid, or the id derived
// from its name.
func policyID(p *Policy) string {
	if p.Decl.UUID != nil {
		return *p.Decl.UUID
	}
	return DerivedPolicyID(p.Name)
}

// parentExpansion marks an `extends` expansion naming the parent (by name
// or policy_id) as used. The compiler cannot see a policy's previous
// version, so it grants nothing here; recorded in the snapshot, it is what
// lets polc diff approve a move under a new parent (docs/composition.md).
func (r *resolver) parentExpansion() {
	if r.parent == nil {
		return
	}
	r.auth.authorize("extends", r.parent.name)
	r.auth.authorize("extends", r.parent.uuid)
}

func (r *resolver) origin(field string) snapshot.Origin {
	return snapshot.Origin{Policy: r.p.Name, Field: field}
}

func (r *resolver) identity() {
	o := r.out
	o.name = r.p.Name
	o.version = r.d.Version
	o.uuid = policyID(r.p)
	if r.d.Description != nil {
		o.description = *r.d.Description
	}
}

// validPattern checks a pattern of facet f and reports invalid_pattern.
func (r *resolver) validPattern(k pattern.Kind, p, path string) bool {
	var err error
	action := ""
	switch k {
	case "qualified":
		action, _, _, err = pattern.ValidateQualified(p)
	case pattern.Action:
		action, err = p, pattern.Validate(k, p)
	default:
		err = pattern.Validate(k, p)
	}
	if err != nil {
		r.diags.Add(r.p.PosOf(path), diag.CodeInvalidPattern, "policy %q: %s: %q: %v", r.p.Name, path, p, err)
		return false
	}
	if k == pattern.Env && strings.HasPrefix(path, "environment.inject") {
		if names := codeChoosingEnv(p); len(names) > 0 {
			r.diags.Warn(r.p.PosOf(path), diag.CodeEnvRunsCode, "policy %q: %s: %q grants setting %s, which choose what bash or a program runs: grant them as you would grant any command", r.p.Name, path, p, strings.Join(names, ", "))
		}
	}
	if k == pattern.Host {
		if why := hostNeverRequested(p); why != "" {
			r.diags.Warn(r.p.PosOf(path), diag.CodeHostNeverRequested, "policy %q: %s: %q matches no request: %s", r.p.Name, path, p, why)
		}
	}
	if near := nearBuiltinAction(action); near != "" {
		r.diags.Warn(r.p.PosOf(path), diag.CodeActionUnknown, "policy %q: %s: %q is not a built-in action; did you mean %q? (action ids match exactly, case included; ignore this for a runtime's own action of that name)", r.p.Name, path, action, near)
	}
	return true
}

// codeEnv are environment variables that choose what bash or a program
// runs: setting one runs a program no command rule judged (PATH finds a
// "cat" in the workspace, BASH_ENV is sourced by bash, LD_PRELOAD loads a
// library, GIT_EXTERNAL_DIFF is run by git diff).
var codeEnv = []string{"PATH", "BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PROMPT_COMMAND", "PS4",
	"SHELLOPTS", "BASHOPTS", "IFS", "GIT_EXTERNAL_DIFF", "GIT_SSH_COMMAND", "GIT_EDITOR", "EDITOR", "PAGER",
	"PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "PERL5OPT", "RUBYOPT",
	// bash's own: BASH_CMDS maps names to files (as hash -p), EXECIGNORE
	// makes a PATH entry skipped, CDPATH moves cd (and with it relative
	// program paths), BASH_LOADABLES_PATH is where enable -f loads from,
	// GLOBIGNORE changes what a glob names.
	"BASH_CMDS", "EXECIGNORE", "CDPATH", "BASH_LOADABLES_PATH", "GLOBIGNORE"}

// codeChoosingEnv returns the names of codeEnv that the environment
// pattern p grants.
func codeChoosingEnv(p string) []string {
	var out []string
	for _, n := range codeEnv {
		if pattern.Match(pattern.Env, p, n) {
			out = append(out, n)
		}
	}
	return out
}

// builtinActions are the built-in action ids.
var builtinActions = sync.OnceValue(func() []string {
	var ids []string
	for _, d := range normalize.BuiltinDescriptors() {
		ids = append(ids, d.ID)
	}
	return ids
})

// nearBuiltinAction returns the built-in action id a literal action id
// nearly spells (the same but for case, or at most two edits away, for
// ids of four characters or more), or "". Allow rules match ids exactly,
// so "Bash" or "read_fil" allows nothing and a misspelt deny denies
// nothing, silently. Custom actions are legitimate: only near misses are
// flagged, and only as a warning.
func nearBuiltinAction(a string) string {
	if a == "" || strings.ContainsAny(a, "*?") {
		return ""
	}
	for _, id := range builtinActions() {
		if a == id {
			return ""
		}
	}
	for _, id := range builtinActions() {
		if strings.EqualFold(a, id) || (len(a) >= 4 && editDistance(a, id) <= 2) {
			return id
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of two short strings (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// denyFacet unions the child's deny list into the inherited one (rule 1).
func (r *resolver) denyFacet(f facet, list *[]string) {
	if list == nil {
		return
	}
	spec := facets[f]
	for i, p := range *list {
		path := fmt.Sprintf("%s[%d]", spec.path, i)
		lp := strings.ToLower(p)
		if !r.validPattern(spec.kind, lp, path) {
			continue
		}
		r.out.sets[f].put(lp, r.origin(spec.path), r.p.PosOf(path))
	}
}

// allowFacet replaces the inherited allow list with the child's, each of
// whose patterns must be covered by the parent's list (rule 2) or be an
// authorized expansion (rule 4).
func (r *resolver) allowFacet(f facet, list *[]string, base string) {
	if list == nil {
		return
	}
	spec := facets[f]
	next := set{}
	for i, p := range *list {
		path := fmt.Sprintf("%s[%d]", base, i)
		if !r.validPattern(spec.kind, p, path) {
			continue
		}
		next.put(p, r.origin(spec.path), r.p.PosOf(path))
	}
	r.narrow(f, next, nil)
	r.out.sets[f] = next
}

// narrow checks that every pattern of next is covered by the parent's set
// for facet f. widenedBy, when non-nil, names the expansion path and value
// to charge for a pattern (used when a mode change, not the pattern, widens).
func (r *resolver) narrow(f facet, next set, widenedBy func(p string) (path string, value any, pos diag.Pos, ok bool)) {
	if r.parent == nil {
		return
	}
	spec := facets[f]
	idx := newCoverIndex(spec.kind, r.parent.sets[f])
	for _, p := range next.sorted() {
		if idx.covers(p) {
			continue
		}
		path, value, pos := spec.path, any(p), next[p].pos
		if widenedBy != nil {
			if wp, wv, wpos, ok := widenedBy(p); ok {
				path, value, pos = wp, wv, wpos
			}
		}
		r.expand(path, value, pos, idx.describe())
	}
}

// expand records an expansion or reports it as unauthorized.
func (r *resolver) expand(path string, value any, pos diag.Pos, parentHas string) {
	if r.auth.authorize(path, value) {
		return
	}
	v, _ := json.Marshal(value)
	r.diags.Add(pos, diag.CodeExpansionUnauth,
		"policy %q: %s %s grants more than parent %q (%s); to grant it, add expansions: [{path: %q, values: [%s], authority: \"…\", evidence: \"…\"}]",
		r.p.Name, path, v, r.parentName, parentHas, path, v)
}

// modeFacet resolves network or subprocess: a mode plus an allowlist that
// only matters in mode "allowlist". The effective allow set is {} for
// "deny", the list for "allowlist" and {"*"} for "allow".
func (r *resolver) modeFacet(f facet, section string, mode *string, list *[]string, modeOut *string, listOut *set) {
	modePath, listPath := section+".mode", section+".allow"
	if list != nil {
		next := set{}
		for i, p := range *list {
			path := fmt.Sprintf("%s[%d]", listPath, i)
			if !r.validPattern(facets[f].kind, p, path) {
				continue
			}
			next.put(p, r.origin(listPath), r.p.PosOf(path))
		}
		*listOut = next
	}
	if mode != nil {
		*modeOut = *mode
	}
	if mode == nil && list == nil {
		return // fully inherited
	}
	effective := set{}
	switch *modeOut {
	case "allowlist":
		effective = (*listOut).clone()
	case "allow":
		if mode != nil {
			effective.put("*", r.origin(modePath), r.p.PosOf(modePath))
		} else if e, ok := r.out.sets[f]["*"]; ok {
			effective["*"] = e
		}
	}
	if list != nil && len(*list) > 0 && *modeOut != "allowlist" {
		r.diags.Warn(r.p.PosOf(listPath), diag.CodeNoEffect, "policy %q: %s has no effect while %s is %q", r.p.Name, listPath, modePath, *modeOut)
	}
	r.narrow(f, effective, func(p string) (string, any, diag.Pos, bool) {
		// Only the "*" that mode "allow" puts in the set is the mode's: a
		// "*" (or any pattern) of an allowlist is charged to the list,
		// whatever mode the child declares, so that an expansion for the
		// mode "allowlist" never authorizes what the list holds.
		if p == "*" && mode != nil && *modeOut == "allow" {
			return modePath, *modeOut, r.p.PosOf(modePath), true
		}
		if list == nil && mode != nil {
			// The inherited list became reachable through the mode change.
			return modePath, *modeOut, r.p.PosOf(modePath), true
		}
		return "", nil, diag.Pos{}, false
	})
	r.out.sets[f] = effective
}

func (r *resolver) shell() {
	s := r.d.Subprocess
	if s == nil || s.Shell == nil {
		return
	}
	if r.parent != nil && *s.Shell == "allow" && r.parent.shell != "allow" {
		r.expand("subprocess.shell", "allow", r.p.PosOf("subprocess.shell"), "parent forbids shell control")
	}
	r.out.shell = *s.Shell
}

func (r *resolver) mcpServers() {
	m := r.d.MCP
	if m == nil || m.Servers == nil {
		return
	}
	tools, resources := set{}, set{}
	for i, s := range *m.Servers {
		base := fmt.Sprintf("mcp.servers[%d]", i)
		for _, g := range []struct {
			list *[]string
			name string
			kind pattern.Kind
			into set
		}{{s.Tools, "tools", pattern.MCP, tools}, {s.Resources, "resources", pattern.MCPResource, resources}} {
			if g.list == nil {
				continue
			}
			for j, t := range *g.list {
				path := fmt.Sprintf("%s.%s[%d]", base, g.name, j)
				target := s.Server + "/" + t
				if !r.validPattern(g.kind, target, path) {
					continue
				}
				g.into.put(target, r.origin("mcp.servers."+g.name), r.p.PosOf(path))
			}
		}
	}
	r.narrow(fMCPTools, tools, nil)
	r.narrow(fMCPResources, resources, nil)
	r.out.sets[fMCPTools], r.out.sets[fMCPResources] = tools, resources
}

func (r *resolver) approvals() {
	a := r.d.Actions
	if a == nil || a.Approve == nil {
		return
	}
	// The parent's expiries, before this policy's entries shorten any.
	inherited := map[string]int64{}
	for key, ap := range r.out.approvals {
		if ap.expiresAfter != nil {
			inherited[key] = *ap.expiresAfter
		}
	}
	for i, ad := range *a.Approve {
		path := fmt.Sprintf("actions.approve[%d]", i)
		lp := strings.ToLower(ad.Pattern)
		if !r.validPattern("qualified", lp, path+".pattern") {
			continue
		}
		ap := &approval{pattern: lp, approver: ad.Approver}
		switch {
		case ad.Approver != nil && ad.ExpiresAfter == nil:
			r.diags.Add(r.p.PosOf(path), diag.CodeSchemaViolation, "policy %q: %s: an approval with an approver needs expires_after", r.p.Name, path)
			continue
		case ad.Approver == nil && ad.ExpiresAfter != nil:
			r.diags.Add(r.p.PosOf(path+".expires_after"), diag.CodeInvalidValue, "policy %q: %s.expires_after has no meaning when approver is null (nobody may approve)", r.p.Name, path)
			continue
		case ad.ExpiresAfter != nil:
			us, err := microseconds(*ad.ExpiresAfter)
			if err != nil {
				r.diags.Add(r.p.PosOf(path+".expires_after"), diag.CodeInvalidValue, "policy %q: %s.expires_after: %v", r.p.Name, path, err)
				continue
			}
			ap.expiresAfter = &us
		}
		ap.entry = entry{origins: []snapshot.Origin{r.origin("actions.approve")}, pos: r.p.PosOf(path)}
		key := ap.key()
		r.approverConflict(ap, path)
		if prev, ok := r.out.approvals[key]; ok {
			prev.addOrigin(r.origin("actions.approve"))
			if ap.expiresAfter != nil && *ap.expiresAfter < *prev.expiresAfter {
				prev.expiresAfter = ap.expiresAfter
			}
			if parent, ok := inherited[key]; ok && ap.expiresAfter != nil && *ap.expiresAfter > parent {
				// As for expires_at: the author asked for more than the
				// parent allows and gets less, which must not pass unseen.
				r.diags.Warn(r.p.PosOf(path+".expires_after"), diag.CodeExpiryClamped, "policy %q: %s.expires_after %s is longer than the parent's %s for %s; the shorter one applies", r.p.Name, path, *ad.ExpiresAfter, time.Duration(parent)*time.Microsecond, key)
			}
			continue
		}
		r.out.approvals[key] = ap
	}
}

// approverConflict refuses, without an expansion, a child's approval rule
// that may match a request an ancestor's approval rule routes to another
// approver. A request that matches several soft approval rules escalates
// to one approver class (that of the first rule by rule id, in both
// engines), so a child rule "bash:*" for "agent" next to a parent's
// "bash:deploy *" for "security" takes the parent's escalations of
// "deploy prod" whenever its id sorts first: the parent's requirement
// stays in the snapshot but no longer decides who approves. A rule with
// approver null only denies (nobody may approve), and a rule with the
// parent's approver routes to the same class; neither can take anything,
// nor can a rule the parent has already (re-declared to shorten its
// expires_after).
func (r *resolver) approverConflict(ap *approval, path string) {
	if r.parent == nil || ap.approver == nil || r.parent.approvals[ap.key()] != nil {
		return
	}
	var taken []string
	for _, k := range sortedKeys(r.parent.approvals) {
		pa := r.parent.approvals[k]
		if pa.approver == nil || *pa.approver == *ap.approver || !approvalsOverlap(pa.pattern, ap.pattern) {
			continue
		}
		taken = append(taken, fmt.Sprintf("%q to approver %q", pa.pattern, *pa.approver))
	}
	if len(taken) == 0 {
		return
	}
	r.expand("actions.approve", ap.pattern, r.p.PosOf(path),
		fmt.Sprintf("it routes %s; a request escalates to one approver, so this rule for %q may take those escalations", strings.Join(taken, ", "), *ap.approver))
}

// approvalsOverlap reports whether one request may match both approval
// patterns a and b (lowercase, possibly qualified). Only the actions are
// compared: a request may carry several targets (a bash line runs several
// commands, each with its paths), and a qualified rule matches when any of
// them matches, so two rules qualifying the same action can match one
// request whatever their targets are.
func approvalsOverlap(a, b string) bool {
	aa, _, aq := strings.Cut(a, ":")
	ba, _, bq := strings.Cut(b, ":")
	switch {
	case aq && bq:
		return aa == ba
	case aq:
		return pattern.Match(pattern.Action, ba, aa)
	case bq:
		return pattern.Match(pattern.Action, aa, ba)
	}
	return pattern.Overlaps(pattern.Action, aa, ba)
}

func (r *resolver) secrets() {
	if r.d.Secrets == nil {
		return
	}
	next := map[string]*secret{}
	// Deny dominates: a parent's forbid entries survive any child list.
	for k, s := range r.out.secrets {
		if s.exposure == "forbid" {
			next[k] = s
		}
	}
	for i, sd := range *r.d.Secrets {
		path := fmt.Sprintf("secrets[%d]", i)
		ns := sd.Namespace
		if sd.Exposure == "forbid" {
			ns = strings.ToLower(ns)
		}
		if !r.validPattern(pattern.Namespace, ns, path+".namespace") {
			continue
		}
		s := &secret{namespace: ns, exposure: sd.Exposure, entry: entry{origins: []snapshot.Origin{r.origin("secrets")}, pos: r.p.PosOf(path)}}
		rule := &snapshot.SecretExposureRule{Namespace: ns, Exposure: sd.Exposure}
		key := snapshot.ExpectedRuleID(rule)
		if prev, ok := next[key]; ok {
			prev.addOrigin(r.origin("secrets"))
			continue
		}
		next[key] = s
		if r.parent == nil || sd.Exposure == "forbid" {
			continue
		}
		covered := false
		var grants []string
		for _, ps := range r.parent.secrets {
			if ps.exposure == "forbid" {
				continue
			}
			grants = append(grants, fmt.Sprintf("%s=%s", ps.namespace, ps.exposure))
			if exposureRank[ps.exposure] >= exposureRank[sd.Exposure] && pattern.Covers(pattern.Namespace, ps.namespace, ns) {
				covered = true
			}
		}
		if !covered {
			slices.Sort(grants)
			r.expand("secrets."+sd.Exposure, ns, s.pos, "parent grants "+orNone(grants))
		}
	}
	if r.parent != nil {
		r.keepRestrictions(next)
	}
	r.out.secrets = next
}

// keepRestrictions keeps the parent's narrower exposures inside the
// child's wider grants. The most restrictive matching entry wins, so a
// parent with "a/*: inject" and "a/x: reference_only" gives a/x
// reference_only; a child listing only "a/*: inject" would silently give
// it inject. A parent entry that a wider child grant may match
// (Overlaps) is kept when that grant covers it (keeping it then only
// lowers exposures, like a forbid entry kept); when a grant the parent
// covers only overlaps it, keeping it would grant its other namespaces,
// so that grant is an expansion unless the child restricts the parent
// entry's whole namespace itself.
func (r *resolver) keepRestrictions(next map[string]*secret) {
	keys := sortedKeys(next)
	for _, pk := range sortedKeys(r.parent.secrets) {
		ps := r.parent.secrets[pk]
		if ps.exposure == "forbid" || next[pk] != nil {
			continue // forbids are kept already; the child lists it itself
		}
		if restricts(next, ps) {
			continue
		}
		var partial []*secret
		for _, k := range keys {
			c := next[k]
			if c.exposure == "forbid" || exposureRank[c.exposure] <= exposureRank[ps.exposure] || !pattern.Overlaps(pattern.Namespace, c.namespace, ps.namespace) {
				continue
			}
			if pattern.Covers(pattern.Namespace, c.namespace, ps.namespace) {
				next[pk] = ps
				partial = nil
				break
			}
			if grants(r.parent.secrets, c) {
				// (a grant the parent does not cover is an expansion
				// already, reported or authorized as such)
				partial = append(partial, c)
			}
		}
		for _, c := range partial {
			r.expand("secrets."+c.exposure, c.namespace, c.pos,
				fmt.Sprintf("parent restricts %s to %s there; list that entry here to keep it", ps.namespace, ps.exposure))
		}
	}
}

var budgetFields = []struct {
	kind string
	get  func(*BudgetsDecl) *int64
}{
	{"calls", func(b *BudgetsDecl) *int64 { return b.Calls }},
	{"cost_microunits", func(b *BudgetsDecl) *int64 { return b.CostMicrounits }},
	{"tokens", func(b *BudgetsDecl) *int64 { return b.Tokens }},
	{"wall_microseconds", func(b *BudgetsDecl) *int64 { return b.WallMicroseconds }},
}

func (r *resolver) budgets() {
	b := r.d.Budgets
	if b == nil {
		return
	}
	parentHasLimits := r.parent != nil && len(r.parent.budgets) > 0
	for _, bf := range budgetFields {
		v := bf.get(b)
		if v == nil {
			continue
		}
		path := "budgets." + bf.kind
		if r.parent != nil {
			if pb, ok := r.parent.budgets[bf.kind]; ok && *v > pb.limit {
				r.expand(path, *v, r.p.PosOf(path), fmt.Sprintf("parent limit is %d", pb.limit))
			}
		}
		r.out.budgets[bf.kind] = &budget{limit: *v, entry: entry{origins: []snapshot.Origin{r.origin(path)}, pos: r.p.PosOf(path)}}
	}
	if b.Window == nil {
		return
	}
	us, declared, err := windowMicroseconds(b.Window)
	if err != nil {
		r.diags.Add(r.p.PosOf("budgets.window"), diag.CodeInvalidValue, "policy %q: budgets.window: %v", r.p.Name, err)
		return
	}
	// Windows are fixed and aligned to the epoch (executor.BudgetWindowStart):
	// only a whole multiple of the parent's window holds every window of
	// the parent inside one of its own, so that the child's limits, never
	// above the parent's, hold in each of the parent's windows too. A
	// 90m window under a 1h one straddles two parent hours and could
	// spend the limit in each half of one hour.
	if parentHasLimits && (r.parent.window == nil || us%*r.parent.window != 0) {
		has := "the parent's budgets apply over the policy's lifetime"
		if r.parent.window != nil {
			// In the author's unit: a duration, and the microseconds
			// the snapshot stores.
			has = fmt.Sprintf("parent window is %s (%dµs); a child's window must be a whole multiple of it", time.Duration(*r.parent.window)*time.Microsecond, *r.parent.window)
		}
		r.expand("budgets.window", declared, r.p.PosOf("budgets.window"), has)
	}
	r.out.window = &us
	r.out.windowEnt = &entry{origins: []snapshot.Origin{r.origin("budgets.window")}, pos: r.p.PosOf("budgets.window")}
}

func (r *resolver) expiry() {
	o := r.out
	contributed := false
	// An inverted window is reported at the field of this policy that took
	// effect (not_before first); with neither, it came through extends.
	inverted := r.p.PosOf("extends")
	if r.d.ExpiresAt != nil {
		t, err := parseTime(*r.d.ExpiresAt)
		if err != nil {
			r.diags.Add(r.p.PosOf("expires_at"), diag.CodeInvalidValue, "policy %q: expires_at: %v", r.p.Name, err)
		} else if o.expiresAt != nil && t.After(*o.expiresAt) {
			r.diags.Warn(r.p.PosOf("expires_at"), diag.CodeExpiryClamped, "policy %q: expires_at %s is later than the parent's %s; the earlier one applies", r.p.Name, formatTime(t), formatTime(*o.expiresAt))
		} else {
			o.expiresAt, contributed = &t, true
			inverted = r.p.PosOf("expires_at")
		}
	}
	if r.d.NotBefore != nil {
		t, err := parseTime(*r.d.NotBefore)
		if err != nil {
			r.diags.Add(r.p.PosOf("not_before"), diag.CodeInvalidValue, "policy %q: not_before: %v", r.p.Name, err)
		} else if o.notBefore != nil && t.Before(*o.notBefore) {
			r.diags.Warn(r.p.PosOf("not_before"), diag.CodeExpiryClamped, "policy %q: not_before %s is earlier than the parent's %s; the later one applies", r.p.Name, formatTime(t), formatTime(*o.notBefore))
		} else {
			o.notBefore, contributed = &t, true
			inverted = r.p.PosOf("not_before")
		}
	}
	if o.notBefore != nil && o.expiresAt != nil && !o.notBefore.Before(*o.expiresAt) {
		r.diags.Add(inverted, diag.CodeInvalidValue, "policy %q: not_before %s is not before expires_at %s", r.p.Name, formatTime(*o.notBefore), formatTime(*o.expiresAt))
	}
	if contributed {
		if o.expiryEntry == nil {
			field := "expires_at"
			if r.d.ExpiresAt == nil {
				field = "not_before"
			}
			o.expiryEntry = &entry{pos: r.p.PosOf(field)}
		}
		if r.d.ExpiresAt != nil {
			o.expiryEntry.addOrigin(r.origin("expires_at"))
		}
		if r.d.NotBefore != nil {
			o.expiryEntry.addOrigin(r.origin("not_before"))
		}
	}
	if o.expiresAt != nil && !o.expiresAt.After(r.cfg.Now()) {
		r.diags.Warn(r.p.PosOf("expires_at"), diag.CodePolicyExpired, "policy %q expired at %s: every request will be denied", r.p.Name, formatTime(*o.expiresAt))
	}
}

func (r *resolver) gates() {
	if r.d.Gates == nil {
		return
	}
	var out []gate
	seen := map[string]bool{}
	for i, g := range *r.d.Gates {
		path := fmt.Sprintf("gates[%d]", i)
		switch {
		case strings.HasPrefix(g.ID, "polc."):
			r.diags.Add(r.p.PosOf(path+".id"), diag.CodeInvalidValue, "policy %q: gate id %q: the prefix \"polc.\" is reserved for default gates", r.p.Name, g.ID)
			continue
		case seen[g.ID]:
			r.diags.Add(r.p.PosOf(path+".id"), diag.CodeInvalidValue, "policy %q: duplicate gate id %q", r.p.Name, g.ID)
			continue
		}
		seen[g.ID] = true
		sel := slices.Clone(g.Rules)
		slices.Sort(sel)
		out = append(out, gate{id: g.ID, level: g.Level, selectors: slices.Compact(sel), pos: r.p.PosOf(path)})
	}
	r.out.gates, r.out.gatesSet = out, true
}

// shadowed finds the allows this policy declares that a deny covers: the
// candidates for allow_shadowed, which lowering judges with the rules'
// gates (shadowedWarnings).
func (r *resolver) shadowed() {
	r.out.shadowed = nil
	for f := range numFacets {
		spec := facets[f]
		if spec.deny || spec.shadowedBy < 0 {
			continue
		}
		kind := spec.kind
		idx := newCoverIndex(kind, r.out.sets[spec.shadowedBy])
		for _, p := range r.out.sets[f].sorted() {
			e := r.out.sets[f][p]
			if !slices.ContainsFunc(e.origins, func(o snapshot.Origin) bool { return o.Policy == r.p.Name }) {
				continue
			}
			ds := idx.coveringAll(strings.ToLower(p))
			if len(ds) == 0 {
				continue
			}
			c := shadowedAllow{facet: f, pattern: p, allow: e}
			for _, d := range ds {
				c.denies = append(c.denies, r.out.sets[spec.shadowedBy][d])
				c.denyPatterns = append(c.denyPatterns, d)
			}
			r.out.shadowed = append(r.out.shadowed, c)
		}
	}
}

// shadowedWarnings warns (allow_shadowed) about each allow of
// r.shadowed the policy can do without, as its snapshot l decides: a deny
// covering it is bound to a gate that blocks (a deny at an advisory gate
// denies nothing), removing it moves no facet's "not allowed" check
// between a blocking and an advisory gate (the check takes the strictest
// gate holding one of the facet's allow rules), and it is not the last
// subprocess grant allowing shell control (each lets a command of shell
// control alone, "> /dev/null", through). Otherwise the allow, though
// every value it allows is denied, changes decisions.
func shadowedWarnings(name string, r *resolved, l *lowered) diag.List {
	var out diag.List
	if len(r.shadowed) == 0 {
		return out
	}
	s := l.snap
	ruleGate := make([]int, len(s.CompiledRules))
	gateOf := map[string]int{}
	defaultIdx := -1
	for gi, g := range s.GateBindings {
		if g.GateID == defaultGate {
			defaultIdx = gi
		}
		for _, id := range g.RuleIDs {
			gateOf[id] = gi
		}
	}
	byID := map[string]int{}
	var byFacet [len(decision.FacetNames)][]int32
	for i, rule := range s.CompiledRules {
		id := rule.Base().RuleID
		byID[id], ruleGate[i] = i, gateOf[id]
		for _, f := range decision.FacetsOf(rule) {
			byFacet[f] = append(byFacet[f], int32(i))
		}
	}
	blocking := func(gi int) bool { return s.GateBindings[gi].Level != snapshot.LevelAdvisory }
	for _, c := range r.shadowed {
		i, ok := byID[l.ids[c.allow]]
		if !ok {
			continue
		}
		deny := ""
		for k, d := range c.denies {
			if j, ok := byID[l.ids[d]]; ok && blocking(ruleGate[j]) {
				deny = c.denyPatterns[k]
				break
			}
		}
		if deny == "" {
			continue
		}
		rule := s.CompiledRules[i]
		gateMoves := false
		for _, f := range decision.FacetsOf(rule) {
			rest := slices.DeleteFunc(slices.Clone(byFacet[f]), func(x int32) bool { return int(x) == i })
			before := decision.FacetGate(s.GateBindings, defaultIdx, byFacet[f], ruleGate)
			after := decision.FacetGate(s.GateBindings, defaultIdx, rest, ruleGate)
			gateMoves = gateMoves || blocking(before) != blocking(after)
		}
		if gateMoves || lastShellGrant(s, i) {
			continue
		}
		spec := facets[c.facet]
		out.Warn(c.allow.pos, diag.CodeAllowShadowed, "policy %q: %s %q is denied by %s %q (deny dominates)", name, spec.path, c.pattern, facets[spec.shadowedBy].path, deny)
	}
	return out
}

// lastShellGrant reports whether rule i of s is a subprocess grant
// allowing shell control that no other grant of s allows.
func lastShellGrant(s *snapshot.Snapshot, i int) bool {
	shell := func(rule snapshot.Rule) bool {
		sr, ok := rule.(*snapshot.SubprocessRule)
		return ok && sr.Effect == snapshot.EffectAllow && sr.Shell != nil && *sr.Shell == "allow"
	}
	if !shell(s.CompiledRules[i]) {
		return false
	}
	for j, rule := range s.CompiledRules {
		if j != i && shell(rule) {
			return false
		}
	}
	return true
}

func orNone(list []string) string {
	if len(list) == 0 {
		return "nothing"
	}
	return strings.Join(list, ", ")
}

// microseconds parses a Go duration that is a positive whole number of
// microseconds.
func microseconds(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 || d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%q must be a positive whole number of microseconds", s)
	}
	if d.Microseconds() > snapshot.MaxSafeInt {
		return 0, fmt.Errorf("%q is more than %d microseconds, the largest integer a snapshot holds exactly", s, int64(snapshot.MaxSafeInt))
	}
	return d.Microseconds(), nil
}

// windowMicroseconds accepts an integer number of microseconds or a
// duration string, and returns the value as declared (for expansions).
func windowMicroseconds(v any) (int64, any, error) {
	switch v := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n <= 0 {
			return 0, nil, fmt.Errorf("%s: want a positive integer of microseconds or a duration", v)
		}
		return n, n, nil
	case string:
		n, err := microseconds(v)
		return n, v, err
	}
	return 0, nil, fmt.Errorf("want microseconds or a duration string")
}

// parseTime parses RFC 3339 and requires microsecond precision.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time", s)
	}
	if t.Nanosecond()%1000 != 0 {
		return time.Time{}, fmt.Errorf("%q has sub-microsecond precision", s)
	}
	return t.UTC(), nil
}

// TimeLayout is the time format of snapshots and evidence records.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

func sortStrings(s []string) []string {
	slices.Sort(s)
	if s == nil {
		return []string{}
	}
	return s
}

func timePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := formatTime(*t)
	return &s
}
