package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// PreflightError is a validator's complaint about a plan: a compile
// failure, so nothing may be spawned.
type PreflightError struct {
	Harness, Step string
	Output        string
}

func (e *PreflightError) Error() string {
	return fmt.Sprintf("harness %q: preflight %s failed: %s", e.Harness, e.Step, truncate(strings.TrimSpace(e.Output), 2000))
}

// Preflight runs the provider's offline validators on a plan
// (Plan.Preflight): `claude doctor` in a directory whose
// .claude/settings.json holds the generated settings, `codex app-server
// --print-startup-config --strict-config` with the plan's -c overrides and
// `codex execpolicy check` on its rules file. Gemini CLI has none. They run
// in a throw-away directory with the plan's environment minus secrets
// (no validator needs credentials or network). Spawn runs it itself (once
// per plan digest); call it to validate a plan without running it.
func Preflight(ctx context.Context, plan *Plan) error {
	for _, st := range plan.Preflight {
		if err := preflightStep(ctx, plan, st); err != nil {
			return err
		}
	}
	return nil
}

// preflightPassed holds the digests of the plans that passed Preflight in
// this process. A digest covers the whole plan (argv, files, environment,
// executable and the validator steps), so a plan that passed once need not
// pay for its validators again; a failure is not remembered.
var preflightPassed sync.Map

// preflightOnce runs Preflight on a sealed plan unless a plan with its
// digest passed it already.
func preflightOnce(ctx context.Context, plan *Plan) error {
	if _, ok := preflightPassed.Load(plan.Digest); ok {
		return nil
	}
	if err := Preflight(ctx, plan); err != nil {
		return err
	}
	preflightPassed.Store(plan.Digest, struct{}{})
	return nil
}

func preflightStep(ctx context.Context, plan *Plan, st PreflightStep) error {
	dir, err := os.MkdirTemp("", "polc-preflight-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sub := func(s string) string { return strings.ReplaceAll(s, RunDir, dir) }
	for _, d := range []string{"home", "codex", "claude-config"} {
		os.MkdirAll(filepath.Join(dir, d), 0o700)
	}
	for _, f := range st.Files {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(sub(f.Content)), os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	var env []string
	for _, v := range plan.Env {
		if v.Secret == "" && !v.Inherit {
			env = append(env, v.Name+"="+sub(v.Value))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	argv := make([]string, len(st.Argv))
	for i, a := range st.Argv {
		argv[i] = sub(a)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	text := out.String()
	fail := func(why string) error {
		return &PreflightError{plan.Harness, st.Name, why + "\n" + text}
	}
	switch {
	case strings.HasPrefix(st.Name, "claude doctor"):
		if runErr != nil {
			return fail(runErr.Error())
		}
		if strings.Contains(text, "Invalid settings") {
			return fail("claude doctor reports invalid settings")
		}
	case strings.HasPrefix(st.Name, "codex execpolicy"):
		if runErr != nil {
			return fail(runErr.Error())
		}
		if !strings.Contains(text, `"decision":"forbidden"`) {
			return fail("the rules file does not forbid its own first command")
		}
	default:
		if runErr != nil {
			return fail(runErr.Error())
		}
		if strings.Contains(text, `"error"`) {
			return fail("the validator reported an error")
		}
	}
	return nil
}
