// Package builtin implements the callables of polc's built-in actions —
// bash, read_file, write_file, edit_file and http_get — for composition
// roots such as polc run. The executor reaches them only through Execute:
// Register hands them to a Registry, which has no way to call them.
//
// These callables run in the executor's process (the in-process backend
// contains nothing); they re-check what they can (paths stay inside the
// workspace) but the authority is the executor's decision.
package builtin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"polc.dev/polc/executor"
	"polc.dev/polc/normalize"
)

// Options configure the built-in callables.
type Options struct {
	// Workspace is the absolute directory relative paths and commands
	// run in, or "" for the workspace of each call's trusted context
	// (executor.WorkspaceFromContext). A call whose context names another
	// workspace than a non-empty Workspace is refused
	// (workspace_mismatch): the policy judged its paths against the
	// context's.
	Workspace string
	// Env is the whole environment of subprocesses (default: PATH only).
	Env []string
	// MaxOutput bounds captured output and read files (default 1 MiB).
	MaxOutput int64
	// HTTPClient performs http_get (default: 30 s timeout, redirects
	// followed only to the request's host and port, no proxy: not even
	// one named by HTTP_PROXY in polc's environment).
	HTTPClient *http.Client
}

// sameHostRedirects follows a redirect only to the host and port the
// policy judged (the request's, as normalize.URLHost gives it); any other
// is not followed, and the redirect response is the result: following it
// would reach a host the policy never judged.
func sameHostRedirects(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	to, err := normalize.URLHost(req.URL.String())
	from, ferr := normalize.URLHost(via[0].URL.String())
	if err != nil || ferr != nil || to != from {
		return http.ErrUseLastResponse
	}
	return nil
}

// defaultHTTPClient is http_get's client: a 30 s timeout, redirects only
// to the judged host and port, and no proxy from polc's environment
// (HTTP_PROXY): the request must reach the host the policy judged, not
// another one.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return &http.Client{Timeout: 30 * time.Second, CheckRedirect: sameHostRedirects, Transport: t}
}

// classError is an error with a stable class and no raw text in outcomes.
type classError struct {
	class string
	err   error
}

func (e *classError) Error() string      { return e.class + ": " + e.err.Error() }
func (e *classError) ErrorClass() string { return e.class }
func (e *classError) Unwrap() error      { return e.err }

func fail(class string, err error) error { return &classError{class, err} }

// Register adds the built-in descriptors with their callables to reg.
func Register(reg *executor.Registry, o Options) error {
	fns, err := callables(o)
	if err != nil {
		return err
	}
	for _, d := range normalize.BuiltinDescriptors() {
		fn := fns[d.ID]
		if fn == nil {
			continue // mcp needs a client; not built in
		}
		if err := reg.Register(d, fn); err != nil {
			return err
		}
	}
	return nil
}

// callables are the built-in callables by action id, o's defaults filled.
func callables(o Options) (map[string]executor.Callable, error) {
	if o.Workspace != "" && !filepath.IsAbs(o.Workspace) {
		return nil, fmt.Errorf("builtin: workspace %q must be absolute (or empty: each call's)", o.Workspace)
	}
	if o.Env == nil {
		o.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = 1 << 20
	}
	if o.HTTPClient == nil {
		o.HTTPClient = defaultHTTPClient()
	}
	return map[string]executor.Callable{
		"bash": o.bash, "read_file": o.readFile, "write_file": o.writeFile,
		"edit_file": o.editFile, "http_get": o.httpGet,
	}, nil
}

// at returns o with the workspace of the call: the trusted context's (see
// Options.Workspace).
func (o Options) at(ctx context.Context) (Options, error) {
	ws, ok := executor.WorkspaceFromContext(ctx)
	switch {
	case !ok && o.Workspace == "":
		return o, fail("workspace_unknown", errors.New("no workspace: Options.Workspace is empty and the call's context names none"))
	case !ok:
		return o, nil
	case !filepath.IsAbs(ws):
		return o, fail("workspace_mismatch", fmt.Errorf("the context's workspace %q is not absolute", ws))
	case o.Workspace == "":
		o.Workspace = filepath.Clean(ws)
	case filepath.Clean(ws) != filepath.Clean(o.Workspace):
		return o, fail("workspace_mismatch", fmt.Errorf("the policy judged this call in workspace %s; these callables serve %s", ws, o.Workspace))
	}
	return o, nil
}

// path resolves a path argument against the workspace, refusing escapes
// the normalizer would refuse (a second check at the point of use), and
// refusing a path that goes through a symlink inside the workspace
// (symlink_refused): the normalizer judged where the link pointed then,
// and a link retargeted before the call would lead elsewhere. With no link
// on the way, the path opened (without following any, openNoFollow) is the
// path judged.
func (o Options) path(ctx context.Context, args map[string]any) (string, error) {
	o, err := o.at(ctx)
	if err != nil {
		return "", err
	}
	p, _ := args["path"].(string)
	abs, nerr := normalize.NormalizePath(o.Workspace, p)
	if nerr != nil {
		return "", fail(nerr.Reason, nerr)
	}
	asWritten := p
	if !filepath.IsAbs(p) {
		asWritten = o.Workspace + "/" + p
	}
	if asWritten = filepath.Clean(asWritten); abs != asWritten {
		return "", fail("symlink_refused", fmt.Errorf("%s resolves through a symlink to %s", asWritten, abs))
	}
	return abs, nil
}

// bash runs the command as a real subprocess in the workspace, exactly as
// the policy judged it (normalize.ParseCommand): without shell control it
// is one argv, run directly with its literal assignments in the
// environment — a glob in it stays the literal text the policy saw;
// only with shell control (never another shell: without bash it fails, spawn_failed), which the executor has allowed
// only if the policy permits shell, does it go through bash -c. The files
// its redirections name are opened by polc first, with no symlink on the
// way, and bash reopens those very files (openRedirects). A non-zero
// exit is a failure of class "exit_status"; the result carries the exit
// code and bounded output. The command's processes end with the call
// (startCommand, waitCommand): ones still running when its main process
// has exited are killed, and a call that exited 0 fails
// "background_killed"; one of them found still there, or a process
// holding the output from outside the session, fails
// "background_escaped" whatever bash's exit status.
func (o Options) bash(ctx context.Context, args map[string]any) (any, error) {
	o, err := o.at(ctx)
	if err != nil {
		return nil, err
	}
	command, _ := args["command"].(string)
	c, nerr := normalize.ParseCommand(command)
	if nerr != nil {
		return nil, fail(nerr.Reason, nerr)
	}
	var cmd *exec.Cmd
	var redirs *redirects
	switch {
	case !c.ShellControl && len(c.Argv) == 1:
		if cmd, err = o.command(ctx, c.Argv[0], append(slices.Clone(o.Env), c.Assign...), nil); err != nil {
			return nil, err
		}
	case c.ShellControl:
		// The command was judged as bash reads it; another shell (dash as
		// /bin/sh) reads some text otherwise, so none stands in for it.
		shell, err := exec.LookPath("bash")
		if err != nil {
			return nil, fail("spawn_failed", fmt.Errorf("bash not found, and the command was judged as bash: %w", err))
		}
		if redirs, err = openRedirects(o.Workspace, command, c); err != nil {
			return nil, err
		}
		defer redirs.close()
		if cmd, err = o.command(ctx, []string{shell, "-c", redirs.text}, o.Env, redirs.extra); err != nil {
			return nil, err
		}
	default:
		return nil, fail(normalize.ReasonInvalidCommand, fmt.Errorf("%d commands without shell control", len(c.Argv)))
	}
	out, err := newOutput(o.MaxOutput)
	if err != nil {
		return nil, fail("spawn_failed", err)
	}
	if err = startCommand(cmd, out); err != nil {
		return nil, fail("spawn_failed", err)
	}
	if redirs != nil {
		redirs.started = true
		redirs.close() // bash holds its own; polc's must not outlive the call
	}
	left, err := waitCommand(ctx, cmd)
	escaped := out.finish(ctx)
	errText := out.stderr.String()
	if redirs != nil && redirs.messages != nil {
		errText = redirs.messages.Replace(errText) // bash names a replaced word as written
	}
	res := map[string]any{"exit_code": cmd.ProcessState.ExitCode(), "stdout": out.stdout.String(), "stderr": errText, "shell": c.ShellControl}
	if left.killed > 0 {
		res["killed_background"] = left.killed
	}
	// An escape outranks every other ending: it is what the caller must
	// know first, whatever bash's exit status. At the timeout or a
	// cancellation the outcome stays timed_out or cancelled, and the
	// executor records the class in the outcome's detail (stage 13).
	var escape error
	switch {
	case left.survived > 0:
		escape = fmt.Errorf("%d processes of the command were still there %v after they were killed", left.survived, killWait)
	case escaped:
		escape = errors.New("a process that left the command's session still holds its output")
	}
	var ee *exec.ExitError
	switch {
	case escape != nil && ctx.Err() != nil:
		return nil, fail("background_escaped", fmt.Errorf("%w: %w", ctx.Err(), escape))
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case escape != nil:
		return res, fail("background_escaped", escape)
	case errors.As(err, &ee):
		return res, fail("exit_status", err)
	case err != nil:
		return nil, fail("spawn_failed", err)
	case left.killed > 0:
		return res, fail("background_killed", fmt.Errorf("%d processes the command left running were killed when it ended", left.killed))
	}
	return res, nil
}

// command is the command that runs argv in the workspace with exactly
// env: through the Spawner of a containing backend when the call's
// context carries one (executor.SpawnerFromContext), so that the kernel
// holds the process to the policy, else directly.
func (o Options) command(ctx context.Context, argv, env []string, extra []*os.File) (*exec.Cmd, error) {
	if sp, ok := executor.SpawnerFromContext(ctx); ok {
		cmd, err := sp.Command(ctx, argv, o.Workspace, env, extra)
		if err != nil {
			return nil, fail("containment_failed", err)
		}
		return cmd, nil
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = o.Workspace
	cmd.ExtraFiles = extra
	return cmd, nil
}

func (o Options) readFile(ctx context.Context, args map[string]any) (any, error) {
	p, err := o.path(ctx, args)
	if err != nil {
		return nil, err
	}
	b, err := o.read(p)
	if err != nil {
		return nil, err
	}
	return map[string]any{"content": string(b), "bytes": len(b)}, nil
}

// read returns the file at p (no symlink on the way), at most MaxOutput
// bytes of it.
func (o Options) read(p string) ([]byte, error) {
	f, err := openNoFollow(p)
	if err != nil {
		return nil, fileFailure("not_readable", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, o.MaxOutput+1))
	if err != nil {
		return nil, fail("not_readable", err)
	}
	if int64(len(b)) > o.MaxOutput {
		return nil, fail("too_large", fmt.Errorf("%s is larger than %d bytes", p, o.MaxOutput))
	}
	return b, nil
}

// fileFailure classes a file error: symlink_refused when the path went
// through a symlink, class otherwise.
func fileFailure(class string, err error) error {
	if errors.Is(err, errSymlink) {
		class = "symlink_refused"
	}
	return fail(class, err)
}

func (o Options) writeFile(ctx context.Context, args map[string]any) (any, error) {
	p, err := o.path(ctx, args)
	if err != nil {
		return nil, err
	}
	content, _ := args["content"].(string)
	if err := writeNoFollow(p, []byte(content), 0o644); err != nil {
		return nil, fileFailure("not_writable", err)
	}
	return map[string]any{"bytes": len(content)}, nil
}

func (o Options) editFile(ctx context.Context, args map[string]any) (any, error) {
	p, err := o.path(ctx, args)
	if err != nil {
		return nil, err
	}
	old, _ := args["old"].(string)
	repl, _ := args["new"].(string)
	b, err := o.read(p)
	if err != nil {
		return nil, err
	}
	if old == "" || bytes.Count(b, []byte(old)) != 1 {
		return nil, fail("edit_not_unique", fmt.Errorf("the text to replace must occur exactly once"))
	}
	out := bytes.Replace(b, []byte(old), []byte(repl), 1)
	if err := writeNoFollow(p, out, 0o644); err != nil {
		return nil, fileFailure("not_writable", err)
	}
	return map[string]any{"bytes": len(out)}, nil
}

func (o Options) httpGet(ctx context.Context, args map[string]any) (any, error) {
	u, _ := args["url"].(string)
	// The host the policy judged (a second check at the point of use):
	// a URL the normalizer refuses is never fetched.
	if _, nerr := normalize.URLHost(u); nerr != nil {
		return nil, fail(nerr.Reason, nerr)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fail("invalid_url", err)
	}
	resp, err := o.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The request may have reached the server: the effect is unknown.
		return nil, fmt.Errorf("%w: %v", executor.ErrAmbiguous, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, o.MaxOutput))
	if err != nil {
		return nil, fmt.Errorf("%w: reading the body: %v", executor.ErrAmbiguous, err)
	}
	return map[string]any{"status": resp.StatusCode, "body": string(b)}, nil
}

// limitedBuffer keeps the first max bytes written.
type limitedBuffer struct {
	bytes.Buffer
	max int64
}

// ReadFrom reads r to its end through Write. Without it io.Copy would
// use the embedded bytes.Buffer's ReadFrom, which keeps everything:
// "cat /dev/zero" grew polc's memory until the call's timeout.
func (l *limitedBuffer) ReadFrom(r io.Reader) (int64, error) {
	var buf [32 << 10]byte
	var n int64
	for {
		k, err := r.Read(buf[:])
		l.Write(buf[:k])
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - int64(l.Len()); room > 0 {
		l.Buffer.Write(p[:min(int64(len(p)), room)])
	}
	return len(p), nil
}
