package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// SpawnOptions configure one run.
type SpawnOptions struct {
	// Prompt replaces {prompt} in the plan's argv.
	Prompt string
	// OnObservation, when set, is called for each observation as it
	// arrives (from one goroutine).
	OnObservation func(Observation)
	// Stream, when set, receives a copy of the provider's raw stdout.
	Stream io.Writer
	// Getenv reads polc's own environment for allowlisted variables and
	// env: secret references. Default: os.LookupEnv.
	Getenv func(string) (string, bool)
}

// RunResult is what a run produced.
type RunResult struct {
	// Argv is the argv that ran (prompt and run directory substituted).
	Argv         []string      `json:"argv"`
	ExitCode     int           `json:"exit_code"`
	Observations []Observation `json:"observations"`
	// Stopped says why polc stopped the provider: "" (it exited by
	// itself), "wall_clock", "attestation", "cancelled" or "read_error"
	// (its stdout could not be read).
	Stopped string `json:"stopped"`
	// Stderr is the end of the provider's stderr, secrets redacted.
	Stderr   string        `json:"stderr"`
	Duration time.Duration `json:"duration"`
	// Certificate is the governed session's certificate (plan.Governed),
	// written by polc mcp when the provider closed it; "" otherwise.
	Certificate string `json:"certificate,omitempty"`
}

// LeaseError is returned when the workspace is held by another run.
type LeaseError struct{ Root, Mode string }

func (e *LeaseError) Error() string {
	return fmt.Sprintf("workspace %s is leased by another harness run (wanted %s)", e.Root, e.Mode)
}

// SecretError is returned when a secret reference cannot be resolved. It
// never holds the value.
type SecretError struct{ Name, Ref, Msg string }

func (e *SecretError) Error() string { return fmt.Sprintf("secret %s (%s): %s", e.Name, e.Ref, e.Msg) }

// AttestationError is returned when the provider's post-launch echo does
// not match the plan; the run was stopped.
type AttestationError struct {
	Provider string
	Mismatch []string
}

func (e *AttestationError) Error() string {
	return fmt.Sprintf("%s post-launch attestation failed, run stopped: %s", e.Provider, strings.Join(e.Mismatch, "; "))
}

// Spawn runs a plan with the adapter of its provider. It refuses a plan
// whose report has blocking results (*NotEnforcedError), leases the
// workspace, writes the plan's files into a fresh private run directory,
// starts the provider with exactly the plan's argv, environment and working
// directory in its own process group, kills the group when the wall clock
// runs out, parses the stream into observations and, where the provider
// echoes its effective policy, stops the run when the echo differs from the
// plan. Before any of that it checks that the executable is still the file
// that was probed — governed, that polc, the session file and its
// snapshot are still what the plan pinned and that no file is at the
// certificate path (governedStart) — and runs the plan's offline validators
// (Preflight) unless a plan with the same digest passed them in this
// process: a provider that ignores a settings file it cannot parse (as
// `claude -p` does) would otherwise run without the plan's rules. The run
// directory is removed afterwards.
func Spawn(ctx context.Context, plan *Plan, opts SpawnOptions) (*RunResult, error) {
	p, ok := providers[plan.Provider]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", plan.Provider)
	}
	return spawn(ctx, p, plan, opts)
}

func spawn(ctx context.Context, p providerImpl, plan *Plan, opts SpawnOptions) (*RunResult, error) {
	if !spawnSupported {
		// Without process groups a provider's children outlive a stop,
		// and without flock the workspace lease is not exclusive: refuse
		// rather than run with controls the plan says hold.
		return nil, fmt.Errorf("harness: spawning a provider needs Unix process groups and flock; not supported on %s", runtime.GOOS)
	}
	if plan.CapabilityReport == nil {
		return nil, &CompileError{plan.Harness, plan.Provider, "plan has no capability report"}
	}
	if b := plan.CapabilityReport.Blocking(); len(b) > 0 {
		return nil, &NotEnforcedError{Harness: plan.Harness, Results: b}
	}
	if err := plan.checkDigest(); err != nil {
		return nil, err
	}
	if err := plan.checkExecutable(); err != nil {
		return nil, err
	}
	if plan.Governed != nil {
		if err := governedStart(plan.Governed); err != nil {
			return nil, &CompileError{plan.Harness, plan.Provider, err.Error()}
		}
	}
	if err := preflightOnce(ctx, plan); err != nil {
		return nil, err
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.LookupEnv
	}
	unlock, err := lease(plan.Workspace)
	if err != nil {
		return nil, err
	}
	defer unlock()
	run, err := os.MkdirTemp("", "polc-run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(run)
	sub := func(s string) string { return strings.ReplaceAll(s, RunDir, run) }
	for _, d := range []string{"home"} {
		if err := os.MkdirAll(filepath.Join(run, d), 0o700); err != nil {
			return nil, err
		}
	}
	for _, f := range plan.Files {
		path := sub(f.Path)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(sub(f.Content)), os.FileMode(f.Mode)); err != nil {
			return nil, err
		}
	}
	env, secrets, err := resolveEnv(plan.Env, sub, getenv)
	if err != nil {
		return nil, err
	}
	if err := checkHelpers(plan, env, sub); err != nil {
		return nil, err
	}
	argv := make([]string, len(plan.Argv))
	for i, a := range plan.Argv {
		argv[i] = strings.ReplaceAll(sub(a), Prompt, opts.Prompt)
	}
	res := &RunResult{Argv: argv}
	cmd := &exec.Cmd{Path: plan.Executable, Args: argv, Dir: plan.Dir, Env: env,
		SysProcAttr: newGroupAttr()}
	if plan.OSSandbox != nil {
		sc, pr, err := polcCommand(ctx, plan, argv, env, sub)
		if err != nil {
			return nil, err
		}
		defer pr.close()
		cmd = sc
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", plan.Executable, err)
	}
	pgid := cmd.Process.Pid
	var stopOnce sync.Once
	stop := func(why string) {
		stopOnce.Do(func() {
			res.Stopped = why
			killGroup(pgid)
		})
	}
	wall := time.Duration(plan.WallClockMicroseconds) * time.Microsecond
	timer := time.AfterFunc(wall, func() { stop("wall_clock") })
	defer timer.Stop()
	ctxDone := make(chan struct{})
	defer close(ctxDone)
	go func() {
		select {
		case <-ctx.Done():
			stop("cancelled")
		case <-ctxDone:
		}
	}()

	var attestErr error
	sawStart := false
	var src io.Reader = stdout
	if opts.Stream != nil {
		src = io.TeeReader(stdout, opts.Stream)
	}
	readErr := parseLines(p, src, func(o Observation) {
		o.Text = redact(o.Text, secrets)
		o.Input = []byte(redact(string(o.Input), secrets))
		if len(o.Input) == 0 {
			o.Input = nil
		} else if !json.Valid(o.Input) {
			// A secret redacted outside a JSON string (a numeric PIN):
			// keep the redacted text, as a JSON string.
			o.Input, _ = json.Marshal(string(o.Input))
		}
		if plan.Attestation != nil && attestErr == nil {
			switch {
			case o.Kind == ObsSessionStart:
				sawStart = true
				if err := p.attest(o, plan.Attestation); err != nil {
					attestErr = err
					stop("attestation")
				}
			case !sawStart && (o.Kind == ObsToolRequest || o.Kind == ObsToolResult):
				// A tool at work before the provider said how it was
				// launched: stop it now, not after the run (fail closed).
				attestErr = &AttestationError{plan.Provider, []string{"a tool event came before the " + plan.Attestation.Event + " event"}}
				stop("attestation")
			}
		}
		o.Raw = nil
		res.Observations = append(res.Observations, o)
		if opts.OnObservation != nil {
			opts.OnObservation(o)
		}
	})
	if readErr != nil {
		// Nobody reads the provider's stdout any more: stop it rather than
		// leave it blocked on a full pipe until the wall clock runs out.
		stop("read_error")
	}
	waitErr := cmd.Wait()
	if plan.Governed != nil {
		waitGroupGone(pgid, governedDrain) // polc mcp closes its session
	}
	killGroup(pgid) // reap anything the provider left behind
	res.Duration = time.Since(start)
	res.Stderr = redact(stderr.String(), secrets)
	res.ExitCode = cmd.ProcessState.ExitCode()
	if attestErr != nil {
		return res, attestErr
	}
	if readErr != nil {
		return res, fmt.Errorf("reading %s's stdout: %w", plan.Provider, readErr)
	}
	if plan.Attestation != nil && !hasKind(res.Observations, ObsSessionStart) && res.Stopped == "" {
		return res, &AttestationError{plan.Provider, []string{"the stream had no " + plan.Attestation.Event + " event"}}
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) {
		return res, waitErr
	}
	if plan.Governed != nil {
		cert, err := governedEnded(plan.Governed)
		if err != nil {
			return res, err
		}
		res.Certificate = cert
	}
	return res, nil
}

// checkHelpers refuses a run whose PATH does not find the sandbox helpers
// the plan's report rests on: an inherited PATH may differ from the one
// probed, and a helper may have been removed since.
func checkHelpers(plan *Plan, env []string, sub func(string) string) error {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, h := range plan.SandboxHelpers {
		if got, want := lookPath(h.Name, path), sub(h.Path); got != want {
			if got == "" {
				got = "none"
			}
			return &CompileError{plan.Harness, plan.Provider, fmt.Sprintf("sandbox helper %s: the plan's controls rest on %s, but the provider's PATH finds %s: probe and plan again", h.Name, want, got)}
		}
	}
	return nil
}

func hasKind(obs []Observation, k ObservationKind) bool {
	for _, o := range obs {
		if o.Kind == k {
			return true
		}
	}
	return false
}

func (p *Plan) checkDigest() error {
	d := p.Digest
	if err := p.Seal(); err != nil {
		return err
	}
	if p.Digest != d {
		got := p.Digest
		p.Digest = d
		return &CompileError{p.Harness, p.Provider, fmt.Sprintf("plan digest %s does not match its content (%s): the plan was changed after compile", d, got)}
	}
	return nil
}

// checkExecutable refuses a plan whose executable is no longer the file
// that was probed (an upgrade in between, or a swap): the plan's version,
// capability table and report describe the probed file. The hash is
// recomputed only when the file's size or modification time changed.
func (p *Plan) checkExecutable() error {
	resolved, err := filepath.EvalSymlinks(p.Executable)
	if err == nil {
		var sha string
		if sha, err = fileSHA256(resolved); err == nil && sha != p.ExecutableSHA256 {
			err = fmt.Errorf("sha256 %s, probed %s", sha, p.ExecutableSHA256)
		}
	}
	if err != nil {
		return &CompileError{p.Harness, p.Provider, fmt.Sprintf("executable %s is not the one probed (%v): probe and plan again", p.Executable, err)}
	}
	return nil
}

// resolveEnv turns the plan's variables into the process environment and
// returns the secret values (for redaction).
func resolveEnv(vars []EnvVar, sub func(string) string, getenv func(string) (string, bool)) ([]string, map[string]string, error) {
	var env []string
	secrets := map[string]string{}
	for _, v := range vars {
		switch {
		case v.Secret != "":
			val, err := resolveSecret(v, getenv)
			if err != nil {
				return nil, nil, err
			}
			secrets[v.Name] = val
			env = append(env, v.Name+"="+val)
		case v.Inherit:
			if val, ok := getenv(v.Name); ok {
				env = append(env, v.Name+"="+val)
			}
		default:
			env = append(env, v.Name+"="+sub(v.Value))
		}
	}
	return env, secrets, nil
}

func resolveSecret(v EnvVar, getenv func(string) (string, bool)) (string, error) {
	kind, ref, _ := strings.Cut(v.Secret, ":")
	switch kind {
	case "env":
		val, ok := getenv(ref)
		if !ok || val == "" {
			return "", &SecretError{v.Name, v.Secret, "the variable is not set in polc's environment"}
		}
		return val, nil
	case "file":
		b, err := os.ReadFile(ref)
		if err != nil {
			return "", &SecretError{v.Name, v.Secret, "cannot read the file"}
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", &SecretError{v.Name, v.Secret, "want env:NAME or file:/path"}
}

// ResolveSecret reads the value a secret reference names (env:NAME, a
// variable of polc's environment, or file:/path, the file's text without
// its trailing newline), as a plan's secret variables are read at spawn.
// name labels the secret in errors and in redaction.
func ResolveSecret(name, ref string, getenv func(string) (string, bool)) (string, error) {
	return resolveSecret(EnvVar{Name: name, Secret: ref}, getenv)
}

// Redact replaces each value of secrets (by name; a value shorter than 4
// bytes is left, as it would redact ordinary text) in s with
// "[redacted:NAME]", as is and as spelt inside a JSON string: what a run
// shows is redacted as the provider's output is.
func Redact(s string, secrets map[string]string) string { return redact(s, secrets) }

// redact replaces every secret value in s, as is and as spelt inside a
// JSON string (inputs are JSON, and an unparsed line's text is raw JSON):
// a value holding '"', '\\' or a control character is escaped there, and
// '<', '>' and '&' too when Go's encoder wrote it.
func redact(s string, secrets map[string]string) string {
	for name, val := range secrets {
		if len(val) < 4 {
			continue
		}
		for _, v := range jsonSpellings(val) {
			s = strings.ReplaceAll(s, v, "[redacted:"+name+"]")
		}
	}
	return s
}

// jsonSpellings returns val and its spellings inside a JSON string, with
// and without HTML escaping.
func jsonSpellings(val string) []string {
	out := []string{val}
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(val) == nil {
			v := strings.TrimSuffix(strings.TrimSpace(b.String()), `"`)
			v = strings.TrimPrefix(v, `"`)
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// lease takes an advisory lock on the workspace root (flock on the
// directory itself, so nothing is written into the workspace).
func lease(w Workspace) (func(), error) {
	f, err := os.Open(w.Root)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	busy, err := lockDir(f, w.Lease == "shared")
	if busy || err != nil {
		f.Close()
		if busy {
			return nil, &LeaseError{w.Root, w.Lease}
		}
		return nil, fmt.Errorf("workspace lease: %w", err)
	}
	return func() {
		unlockDir(f)
		f.Close()
	}, nil
}

// tailBuffer keeps the last 64 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if t.buf.Len() > 64<<10 {
		b := t.buf.Bytes()[t.buf.Len()-(64<<10):]
		t.buf = *bytes.NewBuffer(append([]byte(nil), b...))
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
