package polccli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"polc.dev/polc/approval"
	"polc.dev/polc/chain"
	"polc.dev/polc/executor"
	"polc.dev/polc/internal/atomicfile"
	"polc.dev/polc/internal/diag"
	"polc.dev/polc/internal/jcs"
	"polc.dev/polc/keys"
)

// The approval commands (docs/approvals.md): polc approvals show reads an
// approval request that polc run or polc serve wrote, polc approve and
// polc deny-approval sign an approver's decision on it.

func newApprovalsCmd(e *env) *cobra.Command {
	c := &cobra.Command{Use: "approvals", Short: "Read approval requests (docs/approvals.md)"}
	var dir, format string
	show := &cobra.Command{
		Use:   "show REQ [--dir DIR] [--format text|json]",
		Short: "Print an approval request: what exactly would run and why it needs approval",
		Long: `show prints the approval request REQ: a file that polc run or polc serve
wrote (--approval-requests DIR writes DIR/<id>.json for each escalated
action), or the id of one in --dir DIR. Exit 0, or 2 when it cannot be read
or is not an approval request.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return usagef("--format %q: want text or json", format)
			}
			path, r, err := readApprovalRequest(e, args[0], dir)
			if err != nil {
				return err
			}
			if format == "json" {
				b, _ := r.Marshal()
				_, err := e.stdout.Write(b)
				return err
			}
			printApprovalRequest(e, path, r)
			return nil
		},
	}
	show.Flags().StringVar(&dir, "dir", "", "directory of approval requests (REQ is then an id)")
	show.Flags().StringVar(&format, "format", "text", "text or json")
	c.AddCommand(show)
	return c
}

// readApprovalRequest reads REQ: a file, or <dir>/<REQ>.json when dir is
// set and REQ is no file.
func readApprovalRequest(e *env, req, dir string) (string, *approval.Request, error) {
	path := e.abs(req)
	if _, err := os.Stat(path); err != nil && dir != "" && !strings.ContainsAny(req, `/\`) {
		path = filepath.Join(e.abs(dir), req+".json")
	}
	rel := diag.Rel(e.dir, path)
	data, err := os.ReadFile(path)
	if err != nil {
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			err = pe.Err
		}
		return "", nil, reportOne(e, diag.Pos{File: rel}, diag.CodeIO, "cannot read: %v", err)
	}
	r, err := approval.ParseRequest(data)
	if ae := (*approval.Error)(nil); errors.As(err, &ae) && ae.Code == approval.CodeRequestMismatch {
		// An edited request is bad input (exit 2, docs/cli.md) with
		// its own code: nothing in it may be shown or signed.
		reportOne(e, diag.Pos{File: rel, Line: 1, Col: 1}, ae.Code, "%s", ae.Msg)
		return "", nil, &exitError{ExitUsage}
	}
	if err != nil {
		return "", nil, reportOne(e, diag.Pos{File: rel}, diag.CodeInvalidInput, "%v", err)
	}
	return rel, r, nil
}

func printApprovalRequest(e *env, path string, r *approval.Request) {
	w := e.stdout
	fmt.Fprintf(w, "approval request %s (%s)\n", r.ID, path)
	// Exactly the subject the approval binds (ParseRequest checked that
	// subject_digest is theirs): each argument as canonical JSON, so that
	// a newline or a control character in a command is shown escaped,
	// not interpreted by the terminal.
	fmt.Fprintf(w, "  action:         %s\n", r.Action)
	names := slices.Sorted(maps.Keys(r.Arguments))
	for _, k := range names {
		v, err := jcs.Marshal(r.Arguments[k])
		if err != nil {
			v = []byte("(" + err.Error() + ")")
		}
		kq, _ := jcs.Marshal(k)
		fmt.Fprintf(w, "  argument:       %s = %s\n", kq, v)
	}
	if len(names) == 0 {
		fmt.Fprintf(w, "  arguments:      (none)\n")
	}
	ws, _ := jcs.Marshal(r.Workspace)
	fmt.Fprintf(w, "  workspace:      %s\n", ws)
	fmt.Fprintf(w, "  principal:      %s (tenant %q)\n", r.Principal, r.Tenant)
	fmt.Fprintf(w, "  needs:          approval by %s (gate %s: %s; rules %s)\n", r.ApproverClass, r.GateID, r.ReasonCode, strings.Join(r.RuleIDs, ", "))
	fmt.Fprintf(w, "  policy:         %s %s (%s)\n", r.PolicyID, r.PolicyVersion, r.PolicyDigest)
	fmt.Fprintf(w, "  subject:        %s\n", r.SubjectDigest)
	fmt.Fprintf(w, "  created:        %s\n", r.CreatedAt)
	fmt.Fprintf(w, "  approvable until %s (an approval is valid at most %v)\n", r.ExpiresAt, time.Duration(r.ExpiresAfterUS)*time.Microsecond)
}

type approveParams struct {
	key, dir, out, note, now string
	expires                  time.Duration
}

func newApproveCmd(e *env) *cobra.Command { return newDecisionCmd(e, approval.DecisionApprove) }

func newDenyApprovalCmd(e *env) *cobra.Command { return newDecisionCmd(e, approval.DecisionDeny) }

func newDecisionCmd(e *env, decision string) *cobra.Command {
	p := &approveParams{}
	use, short := "approve", "Sign an approval of an approval request"
	long := `approve signs an approval of the approval request REQ (a file, or an id in
--dir DIR) with --key, a polc keygen signer key: bound to the request's
subject digest, gate, approver class and policy digest, valid from now for
--expires (default 30m) but never past the request's expires_at (its
creation plus the rule's expires_after), with a fresh single-use nonce. The
signed approval (a signed note) goes to -o FILE, or stdout. The executor
accepts it only when a trust file names the key as approver:<class> for the
request's class (polc run --trust). Exit 0, 1 when the request can no longer
be approved (expired), 2 on bad input.`
	if decision == approval.DecisionDeny {
		use, short = "deny-approval", "Sign a refusal of an approval request"
		long = `deny-approval signs a refusal of the approval request REQ, in the approval
format with decision "deny": presented to the executor it is refused
(approval_refused) and the request stays escalated. Flags as polc approve.`
	}
	c := &cobra.Command{
		Use:   use + " REQ --key KEY [--expires 30m] [--note TEXT] [-o FILE]",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return runApprove(c.Context(), e, p, args[0], decision)
		},
	}
	c.Flags().StringVar(&p.key, "key", "", "approver signer key (polc keygen)")
	c.Flags().StringVar(&p.dir, "dir", "", "directory of approval requests (REQ is then an id)")
	c.Flags().StringVarP(&p.out, "out", "o", "", "output file (default stdout)")
	c.Flags().StringVar(&p.note, "note", "", fmt.Sprintf("note recorded in the approval (at most %d bytes)", approval.MaxNoteBytes))
	c.Flags().DurationVar(&p.expires, "expires", 30*time.Minute, "how long the approval is valid (capped by the request's expires_at)")
	c.Flags().StringVar(&p.now, "now", "", "fixed clock, RFC 3339 (reproducible runs)")
	c.Flags().MarkHidden("now")
	return c
}

func runApprove(_ context.Context, e *env, p *approveParams, req, decision string) error {
	if p.key == "" {
		return usagef("--key KEY is required (a polc keygen signer key)")
	}
	if p.expires <= 0 {
		return usagef("--expires %v: want a positive duration", p.expires)
	}
	if len(p.note) > approval.MaxNoteBytes {
		return usagef("--note: at most %d bytes", approval.MaxNoteBytes)
	}
	signer, err := keys.ReadSigner(e.abs(p.key))
	if err != nil {
		return usagef("--key: %v", err)
	}
	path, r, err := readApprovalRequest(e, req, p.dir)
	if err != nil {
		return err
	}
	clock, err := fixedClock(p.now)
	if err != nil {
		return err
	}
	now := clock().UTC().Truncate(time.Microsecond)
	until, err := chain.ParseTime(r.ExpiresAt)
	if err != nil {
		return reportOne(e, diag.Pos{File: path}, diag.CodeInvalidInput, "expires_at: %v", err)
	}
	expires := now.Add(p.expires)
	if lim := now.Add(time.Duration(r.ExpiresAfterUS) * time.Microsecond); lim.Before(expires) {
		expires = lim
	}
	if until.Before(expires) {
		expires = until
	}
	if !expires.After(now) {
		return reportOne(e, diag.Pos{File: path}, approval.CodeExpired, "approval request %s expired at %s: the action must be retried for a new request", r.ID, r.ExpiresAt)
	}
	nonce, err := approval.NewNonce()
	if err != nil {
		return err
	}
	a := &approval.Approval{
		Version: approval.Version, ApprovalID: executor.NewUUID(), RequestID: r.ID, Decision: decision,
		ApproverClass: r.ApproverClass, GateID: r.GateID, KeyID: fmt.Sprintf("%s+%08x", signer.Name(), signer.KeyHash()),
		Nonce: nonce, Note: p.note, PolicyDigest: r.PolicyDigest, SubjectDigest: r.SubjectDigest,
		IssuedAt: chain.FormatTime(now), ExpiresAt: chain.FormatTime(expires),
	}
	signed, err := approval.Sign(a, signer)
	if err != nil {
		return usagef("%v", err)
	}
	if p.out == "" {
		_, err = e.stdout.Write(signed)
		return err
	}
	out := e.abs(p.out)
	if err := atomicfile.WriteFile(out, signed, 0o644); err != nil {
		return reportOne(e, diag.Pos{File: diag.Rel(e.dir, out)}, diag.CodeIO, "cannot write: %v", err)
	}
	fmt.Fprintf(e.stderr, "polc: %s %s of request %s by %s (class %s), valid until %s: %s\n", decision, a.ApprovalID, r.ID, a.KeyID, a.ApproverClass, a.ExpiresAt, diag.Rel(e.dir, out))
	return nil
}

// MaxSessionApprovals bounds the approvals a session holds (polc serve's
// POST /v1/approvals, the scenario's files): every escalation presents
// them all, and each is verified again then. Expired ones are dropped
// first, so only approvals still usable count.
const MaxSessionApprovals = 1000

// errApprovalsFull is approvalSet.add's refusal past MaxSessionApprovals.
var errApprovalsFull = fmt.Errorf("the session holds %d approvals that are still valid, its limit", MaxSessionApprovals)

// approvalSet is a session's signed approvals, one per nonce, safe for
// polc serve's concurrent requests.
type approvalSet struct {
	mu   sync.Mutex
	list []heldApproval
}

type heldApproval struct {
	signed  []byte
	nonce   string
	expires time.Time
}

// add holds signed (parsed as a) unless an approval with its nonce is
// held already (dup); past MaxSessionApprovals it drops the approvals
// expired at now and, when still full, refuses with errApprovalsFull.
func (s *approvalSet) add(signed []byte, a *approval.Approval, now time.Time) (dup bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.list {
		if h.nonce == a.Nonce {
			return true, nil
		}
	}
	if len(s.list) >= MaxSessionApprovals {
		s.list = slices.DeleteFunc(s.list, func(h heldApproval) bool { return !now.Before(h.expires) })
		if len(s.list) >= MaxSessionApprovals {
			return false, errApprovalsFull
		}
	}
	_, expires := a.Times()
	s.list = append(s.list, heldApproval{signed: signed, nonce: a.Nonce, expires: expires})
	return false, nil
}

func (s *approvalSet) all() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(s.list))
	for i, h := range s.list {
		out[i] = h.signed
	}
	return out
}

// loadApprovals reads the session's approver trust file and signed
// approvals. Each approval must parse (a typo is refused up front, not
// found as approval_malformed on every action); whether it verifies is the
// executor's to judge. The minimal profile has no state store to record
// spent approvals in, so it takes none.
func (s *session) loadApprovals(cfg *executor.Config, profile executor.Profile) error {
	e, p := s.e, s.p
	if profile == executor.ProfileMinimal {
		return usagef("approvals need a state store to record spent approvals: use the durable, governed or certifiable profile with --state FILE")
	}
	if p.trust == "" {
		return usagef("approvals need --trust FILE, naming the approver keys (approver:<class> <vkey>)")
	}
	tpath := e.abs(p.trust)
	data, err := os.ReadFile(tpath)
	if err != nil {
		return s.inputErr(tpath, err)
	}
	trust, err := chain.ParseTrust(data)
	if err != nil {
		return s.inputErr(tpath, err)
	}
	cfg.ApprovalTrust = trust
	s.approvalTrust = trust
	for _, f := range p.approvals {
		path := e.abs(f)
		data, err := os.ReadFile(path)
		if err != nil {
			return s.inputErr(path, err)
		}
		a, err := approval.Parse(data)
		if err != nil {
			return s.inputErr(path, err)
		}
		if _, err := s.approvals.add(data, a, time.Time{}); err != nil {
			return s.inputErr(path, err)
		}
	}
	return nil
}

// writeApprovalRequest writes an escalated outcome's approval request to
// the --approval-requests directory as <id>.json and returns its path as
// shown.
func (s *session) writeApprovalRequest(r *executor.ApprovalRequest) (string, error) {
	dir := s.e.abs(s.p.approvalRequests)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", s.ioErr(dir, "create directory", err)
	}
	b, err := r.File().Marshal()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, r.ID+".json")
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return "", s.ioErr(path, "write", err)
	}
	return diag.Rel(s.e.dir, path), nil
}

// approvalRequestsOutside refuses an --approval-requests directory inside
// the workspace ws (symlinks resolved): the agent may write there, and a
// request it plants or edits there is what an approver would read. A
// planted request still could not change what an approval binds (polc
// approve checks subject_digest against the subject it shows), but it
// could ask for the approval of a subject the executor never escalated.
// Write grants outside the workspace (an absolute filesystem.write
// pattern) are the policy author's to keep off the directory
// (docs/approvals.md).
func approvalRequestsOutside(dir, ws string) error {
	rdir, err := resolvedPath(dir)
	if err != nil {
		return usagef("--approval-requests %s: %v", dir, err)
	}
	rws, err := resolvedPath(ws)
	if err != nil {
		return usagef("workspace %s: %v", ws, err)
	}
	if rdir == rws || strings.HasPrefix(rdir, rws+string(filepath.Separator)) || rws == string(filepath.Separator) {
		return usagef("--approval-requests %s is inside the workspace %s, where the agent may write: an approval request there could be planted or edited; choose a directory outside it", dir, ws)
	}
	return nil
}

// resolvedPath resolves the symlinks of the longest existing prefix of
// the absolute path p.
func resolvedPath(p string) (string, error) {
	rest, cur := "", filepath.Clean(p)
	for {
		r, err := filepath.EvalSymlinks(cur)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(cur); lerr == nil {
			// A dangling symlink: where it leads is not known yet.
			return "", fmt.Errorf("%s is a symlink to a missing target", cur)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return filepath.Clean(p), nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
