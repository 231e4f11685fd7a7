package decision

import (
	mbits "math/bits"
	"slices"
	"strings"
	"unsafe"

	"polc.dev/polc/internal/digest"
	"polc.dev/polc/normalize"
	"polc.dev/polc/snapshot"
)

var (
	notAllowedMsg = func() (m [numFacets]string) {
		for i, n := range FacetNames {
			m[i] = "not_allowed:" + n
		}
		return
	}()
	accessFacet = map[string]int{"read": FacetPathRead, "write": FacetPathWrite, "execute": FacetPathExecute}
)

// Scratch holds the per-evaluation buffers of one goroutine. A Scratch may be
// reused for any number of evaluations of the Policy that made it, but not
// concurrently.
type Scratch struct {
	deny, allow, appr bits
	facets            [numFacets]bool
	low               lowered
	mcpBuf, resBuf    []byte
	gDeny, gAppr      []bool
	gNA               []int
	dec               Decision // warm result buffers of EvaluatePooled
}

// NewScratch returns buffers sized for p.
func (p *Policy) NewScratch() *Scratch {
	n := len(p.ruleIDs)
	g := len(p.gates)
	return &Scratch{deny: newBits(n), allow: newBits(n), appr: newBits(n),
		gDeny: make([]bool, g), gAppr: make([]bool, g), gNA: make([]int, g)}
}

// Decide decides r under p: the entry point a runtime embeds
// (decision.Compile(snap), then p.Decide(req)). It is EvaluatePooled
// without the diagnostics, which never change a decision (problems deny):
// a pooled Scratch, and a returned decision that shares nothing (two
// allocations whatever its size). A caller that decides in a loop keeps a
// Scratch per goroutine and calls EvaluateInto, which allocates nothing.
func (p *Policy) Decide(r *normalize.Normalized) Decision {
	d, _ := p.EvaluatePooled(r)
	return d
}

// Evaluate evaluates r against p (docs/decisions.md). It evaluates every
// rule and never fails: problems with the request deny.
func (p *Policy) Evaluate(r *normalize.Normalized) (Decision, Diagnostics) {
	d := Decision{RuleIDs: []string{}, Reasons: []string{}}
	diags := p.EvaluateInto(r, p.NewScratch(), &d)
	d.fillEmpty()
	return d, diags
}

// fillEmpty makes absent lists empty, the form decisions are printed,
// compared and digested in.
func (d *Decision) fillEmpty() {
	if d.RuleIDs == nil {
		d.RuleIDs = []string{}
	}
	if d.Reasons == nil {
		d.Reasons = []string{}
	}
	if d.Gates == nil {
		d.Gates = []GateResult{}
	}
	for i := range d.Gates {
		if d.Gates[i].RuleIDs == nil {
			d.Gates[i].RuleIDs = []string{}
		}
	}
}

// Digest is the sha256-v1 digest of the decision's canonical JSON, absent
// lists counting as empty ones. It does not modify d.
func (d *Decision) Digest() string {
	c := *d
	c.Gates = slices.Clone(d.Gates)
	c.fillEmpty()
	return digest.Of(&c)
}

// EvaluatePooled is Evaluate with a pooled Scratch: the decision it
// returns is detached from the pool (two allocations whatever its size).
func (p *Policy) EvaluatePooled(r *normalize.Normalized) (Decision, Diagnostics) {
	s, _ := p.scratch.Get().(*Scratch)
	if s == nil {
		s = p.NewScratch()
	}
	diags := p.EvaluateInto(r, s, &s.dec)
	d := s.dec.detach()
	p.scratch.Put(s)
	return d, diags
}

// EvaluateWith is EvaluatePooled writing the decision into d, whose lists
// start in gateBuf and strBuf (which d then owns) and grow out of them when
// they do not fit: no copy, and no allocation for the usual decision. The
// result equals EvaluatePooled's, every list non-nil. The executor's
// stage 7 evaluates with it, into buffers its attempt holds.
func (p *Policy) EvaluateWith(r *normalize.Normalized, d *Decision, gateBuf []GateResult, strBuf []string) Diagnostics {
	// Carve one list per gate (two strings each) and the rule ids and
	// reasons (the rest, halved) from strBuf, each unable to grow into
	// its neighbour.
	*d = Decision{Gates: gateBuf[:0:len(gateBuf)]}
	off := 0
	carve := func(n int) []string {
		n = min(n, len(strBuf)-off)
		s := strBuf[off : off : off+n]
		off += n
		return s
	}
	for i := range gateBuf {
		gateBuf[i] = GateResult{RuleIDs: carve(2)}
	}
	rest := len(strBuf) - off
	d.RuleIDs = carve(rest / 2)
	d.Reasons = carve(rest - rest/2)
	s, _ := p.scratch.Get().(*Scratch)
	if s == nil {
		s = p.NewScratch()
	}
	diags := p.EvaluateInto(r, s, d)
	p.scratch.Put(s)
	d.fillEmpty()
	return diags
}

// detach returns a copy of d that shares nothing with it, every list
// non-nil: the gate results in one new array and every string list
// (the gates' rule ids, the rule ids, the reasons) carved from another,
// so that a decision costs two allocations whatever its size.
func (d *Decision) detach() Decision {
	out := *d
	n := len(d.RuleIDs) + len(d.Reasons)
	for i := range d.Gates {
		n += len(d.Gates[i].RuleIDs)
	}
	strs := make([]string, 0, n)
	take := func(src []string) []string {
		start := len(strs)
		strs = append(strs, src...)
		return strs[start:len(strs):len(strs)]
	}
	out.Gates = make([]GateResult, len(d.Gates))
	copy(out.Gates, d.Gates)
	for i := range out.Gates {
		out.Gates[i].RuleIDs = take(d.Gates[i].RuleIDs)
	}
	out.RuleIDs, out.Reasons = take(d.RuleIDs), take(d.Reasons)
	return out
}

// EvaluateInto is Evaluate with caller-owned buffers: the slices of d are
// reused, and with a warm Scratch and d it does not allocate (for requests
// whose deny-matched values are already lowercase).
func (p *Policy) EvaluateInto(r *normalize.Normalized, s *Scratch, d *Decision) Diagnostics {
	var diags Diagnostics
	s.deny.clear()
	s.allow.clear()
	s.appr.clear()
	s.facets = [numFacets]bool{}
	L := &s.low
	L.cmds = r.Commands
	L.action = strings.ToLower(r.Action)
	L.ws = strings.ToLower(r.Workspace)
	L.paths = L.paths[:0]
	for _, pa := range r.Paths {
		L.paths = append(L.paths, strings.ToLower(pa.Path))
	}
	L.hosts = L.hosts[:0]
	for _, h := range r.Hosts {
		L.hosts = append(L.hosts, strings.ToLower(h))
	}
	L.env = L.env[:0]
	for _, e := range r.Env {
		L.env = append(L.env, strings.ToLower(e))
	}
	L.secret = L.secret[:0]
	for _, ns := range r.Secrets {
		L.secret = append(L.secret, strings.ToLower(ns))
	}
	mcp := ""
	L.mcp = ""
	if r.MCP != nil {
		s.mcpBuf = append(append(append(s.mcpBuf[:0], r.MCP.Server...), '/'), r.MCP.Tool...)
		mcp = unsafe.String(unsafe.SliceData(s.mcpBuf), len(s.mcpBuf))
		L.mcp = strings.ToLower(mcp)
	}

	// 1. Deny matches.
	p.deny.match(L, s.deny)
	for _, path := range L.paths {
		p.fsDeny.match(path, L.ws, s.deny)
	}
	for _, h := range L.hosts {
		p.netDeny.match(h, s.deny)
	}
	for _, argv := range r.Commands {
		p.subDeny.match(argv, true, s.deny)
	}
	if L.mcp != "" {
		p.mcpDeny.match(L.mcp, s.deny)
	}
	for _, e := range L.env {
		p.envDeny.match(e, s.deny)
	}
	for _, ns := range L.secret {
		p.secretForbid.match(ns, s.deny)
	}

	// 2. Grants and not-allowed facets.
	F := &s.facets
	F[FacetPrincipal] = !p.principals.match(r.Principal, nil)
	F[FacetTenant] = !p.tenants.match(r.Tenant, nil)
	F[FacetAction] = !p.actionAllow.match(r.Action, s.allow)
	for _, argv := range r.Commands {
		if !p.subAllow.match(argv, false, s.allow) {
			F[FacetCommand] = true
		}
		if r.ShellControl && !p.subShell.match(argv, false, nil) {
			F[FacetShell] = true
		}
	}
	if r.ShellControl && len(r.Commands) == 0 && !p.hasShellAllow {
		F[FacetShell] = true
	}
	for _, pa := range r.Paths {
		f, ok := accessFacet[pa.Access]
		if !ok {
			diags.Errors = append(diags.Errors, "unknown path access "+pa.Access)
			F[FacetPathRead] = true
			continue
		}
		if !p.fsAllow[f-FacetPathRead].match(pa.Path, r.Workspace, s.allow) {
			F[f] = true
		}
	}
	for _, h := range r.Hosts {
		if !p.netAllow.match(h, s.allow) {
			F[FacetHost] = true
		}
	}
	for _, e := range r.Env {
		if !p.envAllow.match(e, s.allow) {
			F[FacetEnv] = true
		}
	}
	for _, ns := range r.Secrets {
		if !p.secretAllow.match(ns, s.allow) {
			F[FacetSecret] = true
		}
	}
	if r.MCP != nil {
		if !p.mcpTool.match(mcp, s.allow) {
			F[FacetMCPTool] = true
		}
		if r.MCP.Resource != nil {
			// A buffer of its own: L.mcp may alias mcpBuf until approvals ran.
			s.resBuf = append(append(append(s.resBuf[:0], r.MCP.Server...), '/'), *r.MCP.Resource...)
			res := unsafe.String(unsafe.SliceData(s.resBuf), len(s.resBuf))
			if !p.mcpRes.match(res, s.allow) {
				F[FacetMCPResource] = true
			}
		}
	}
	if e := p.expiry; e != nil {
		if (e.notBefore == "" || r.Time >= e.notBefore) && (e.expiresAt == "" || r.Time < e.expiresAt) {
			s.allow.set(e.id)
		} else {
			F[FacetExpiry] = true
		}
	}
	for _, b := range p.budgets {
		if r.Usage.Of(b.kind) < b.limit {
			s.allow.set(b.id)
		} else {
			F[FacetBudget] = true
		}
	}

	// 3. Approvals.
	p.approval.match(L, s.appr)
	L.cmds = nil // the pooled scratch keeps no request data

	p.reduce(s, d)
	return diags
}

// reduce builds the gate view and the disposition from the match sets.
func (p *Policy) reduce(s *Scratch, d *Decision) {
	ng := len(p.gates)
	if cap(d.Gates) < ng {
		d.Gates = make([]GateResult, ng)
	}
	d.Gates = d.Gates[:ng]
	for g := range ng {
		s.gDeny[g], s.gAppr[g], s.gNA[g] = false, false, -1
		d.Gates[g].RuleIDs = d.Gates[g].RuleIDs[:0]
	}
	for w := range s.deny {
		word := s.deny[w] | s.appr[w] | s.allow[w]
		for word != 0 {
			i := int32(w*64 + mbits.TrailingZeros64(word))
			word &= word - 1
			g := p.ruleGate[i]
			d.Gates[g].RuleIDs = append(d.Gates[g].RuleIDs, p.ruleIDs[i])
			if s.deny.has(i) {
				s.gDeny[g] = true
			}
			if s.appr.has(i) {
				s.gAppr[g] = true
			}
		}
	}
	for _, f := range facetOrder {
		if s.facets[f] {
			if g := p.facetGate[f]; s.gNA[g] < 0 {
				s.gNA[g] = f
			}
		}
	}
	hardDeny, softBlock, softAppr := false, false, false
	for g := range ng {
		gr := &d.Gates[g]
		gr.GateID, gr.Level = p.gates[g].GateID, p.gates[g].Level
		switch {
		case s.gDeny[g]:
			gr.Decision, gr.ReasonCode = Deny, "denied"
		case s.gNA[g] >= 0:
			gr.Decision, gr.ReasonCode = Deny, notAllowedMsg[s.gNA[g]]
		case s.gAppr[g]:
			gr.Decision, gr.ReasonCode = Deny, "approval_required"
		default:
			gr.Decision, gr.ReasonCode = Allow, "allowed"
		}
		switch gr.Level {
		case snapshot.LevelHard:
			hardDeny = hardDeny || gr.Decision == Deny
		case snapshot.LevelSoft:
			softBlock = softBlock || s.gDeny[g] || s.gNA[g] >= 0
			softAppr = softAppr || s.gAppr[g]
		}
	}
	d.RuleIDs, d.Reasons, d.ApproverClass = d.RuleIDs[:0], d.Reasons[:0], nil
	level := func(i int32) string { return p.gates[p.ruleGate[i]].Level }
	var approver *string
	unavailable := false
	if !hardDeny && !softBlock && softAppr {
		for w := range s.appr {
			for word := s.appr[w]; word != 0; word &= word - 1 {
				i := int32(w*64 + mbits.TrailingZeros64(word))
				if level(i) != snapshot.LevelSoft {
					continue
				}
				if p.approver[i] == nil {
					unavailable = true
				} else if approver == nil {
					approver = p.approver[i]
				}
			}
		}
	}
	switch {
	case hardDeny || softBlock || (softAppr && unavailable):
		d.Disposition = Deny
		for w := range s.deny {
			for word := s.deny[w] | s.appr[w]; word != 0; word &= word - 1 {
				i := int32(w*64 + mbits.TrailingZeros64(word))
				lv := level(i)
				if lv == snapshot.LevelAdvisory {
					continue
				}
				d.RuleIDs = append(d.RuleIDs, p.ruleIDs[i])
				switch {
				case s.deny.has(i) || lv == snapshot.LevelHard:
					d.Reasons = append(d.Reasons, p.deniedMsg[i])
				case p.approver[i] == nil:
					d.Reasons = append(d.Reasons, p.unavailMsg[i])
				}
			}
		}
		for f := range numFacets {
			if s.facets[f] && p.gates[p.facetGate[f]].Level != snapshot.LevelAdvisory {
				d.Reasons = append(d.Reasons, notAllowedMsg[f])
			}
		}
	case softAppr:
		d.Disposition = Escalate
		d.ApproverClass = approver
		for w := range s.appr {
			for word := s.appr[w]; word != 0; word &= word - 1 {
				i := int32(w*64 + mbits.TrailingZeros64(word))
				if level(i) == snapshot.LevelSoft {
					d.RuleIDs = append(d.RuleIDs, p.ruleIDs[i])
					d.Reasons = append(d.Reasons, p.approvalMsg(i))
				}
			}
		}
	default:
		d.Disposition = Allow
		for w := range s.allow {
			for word := s.allow[w]; word != 0; word &= word - 1 {
				d.RuleIDs = append(d.RuleIDs, p.ruleIDs[w*64+mbits.TrailingZeros64(word)])
			}
		}
		d.Reasons = append(d.Reasons, "allowed")
		for g := range ng {
			if d.Gates[g].Level == snapshot.LevelAdvisory && d.Gates[g].Decision == Deny {
				d.Reasons = append(d.Reasons, p.advisoryMsg[g])
			}
		}
	}
	slices.Sort(d.Reasons)
	d.Reasons = slices.Compact(d.Reasons)
}

func (p *Policy) approvalMsg(i int32) string { return p.approvalReq[i] }

// Explanation lists what each evaluation step found, for polc eval
// --explain: the deny rules that matched, the facets not allowed (with the
// gate each belongs to), the allow rules that granted something, and the
// approval rules that matched.
type Explanation struct {
	DenyMatches []string          `json:"deny_matches"`
	NotAllowed  map[string]string `json:"not_allowed"`
	Grants      []string          `json:"grants"`
	Approvals   []string          `json:"approvals"`
}

// Explain evaluates r and also returns the intermediate match sets.
func (p *Policy) Explain(r *normalize.Normalized) (Decision, Explanation, Diagnostics) {
	s := p.NewScratch()
	var d Decision
	diags := p.EvaluateInto(r, s, &d)
	d.fillEmpty() // as Evaluate's: a gate without rules has [], not null
	ids := func(b bits) []string {
		out := []string{}
		for i := range p.ruleIDs {
			if b.has(int32(i)) {
				out = append(out, p.ruleIDs[i])
			}
		}
		return out
	}
	e := Explanation{DenyMatches: ids(s.deny), Grants: ids(s.allow), Approvals: ids(s.appr), NotAllowed: map[string]string{}}
	for f := range numFacets {
		if s.facets[f] {
			e.NotAllowed[FacetNames[f]] = p.gates[p.facetGate[f]].GateID
		}
	}
	return d, e, diags
}

// AdmitsHost reports whether the policy's network facet admits a
// destination: hostport is "host:port" as the normalizer writes a host
// facet (normalize.URLHost: lowercase, IPv6 literals in brackets). It is
// the network part of Decide alone, with the same matchers: a deny
// pattern that matches refuses (case-insensitively), else an allow
// pattern must match. A containing backend's egress proxy asks it for
// each connection an allowed process opens.
func (p *Policy) AdmitsHost(hostport string) bool {
	if p.netDeny.match(strings.ToLower(hostport), nil) {
		return false
	}
	return p.netAllow.match(hostport, nil)
}
