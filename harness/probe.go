package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"polc.dev/polc/internal/atomicfile"
)

// ProbeResult identifies an installed provider CLI. Supported is false for
// a version that has no capability table: everything compiled for it is
// unsupported.
type ProbeResult struct {
	Provider string `json:"provider"`
	// Executable is the absolute path the plan runs, as found (a symlink is
	// kept: npm's .bin links are how the CLIs are installed).
	Executable string `json:"executable"`
	// Resolved is Executable with symlinks evaluated; SHA256 is its hash.
	Resolved string `json:"resolved"`
	SHA256   string `json:"sha256"`
	Version  string `json:"version"`
	// Supported is true when a capability table covers Version.
	Supported bool   `json:"supported"`
	Reason    string `json:"reason"`
	// Node is the node executable for CLIs that are Node scripts, or "".
	Node string `json:"node"`
	// Bwrap and Socat are the bubblewrap and socat the provider finds on
	// the PATH a plan gives it unless the spec allowlists PATH (the node
	// directory, then /usr/local/sbin:…:/bin), when found and (for bwrap)
	// able to create a sandbox; "" otherwise. Claude Code and Gemini CLI
	// look their sandbox helpers up on their own PATH: the host having
	// them elsewhere does not sandbox anything.
	Bwrap string `json:"bwrap"`
	Socat string `json:"socat"`
	// InheritedPath is polc's own PATH when probed (ProbeOptions.SearchPath),
	// which a spec that allowlists PATH passes on; InheritedBwrap and
	// InheritedSocat are the helpers found on it, as above.
	InheritedPath  string `json:"inherited_path"`
	InheritedBwrap string `json:"inherited_bwrap"`
	InheritedSocat string `json:"inherited_socat"`
	// BundledBwrap is the bubblewrap Codex ships next to its binary (the
	// one its capability table was established with), when found and
	// able to create a sandbox; "" otherwise and for other providers.
	BundledBwrap string `json:"bundled_bwrap"`
	// Cached is true when the version came from the probe cache rather
	// than from running the executable (the hash was recomputed).
	Cached bool `json:"cached"`
}

// Evidence returns the report's probe evidence lines.
func (p *ProbeResult) Evidence() []string {
	ev := []string{fmt.Sprintf("probe:%s %s sha256:%s %s", p.Provider, p.Version, p.SHA256, p.Resolved)}
	for _, t := range [][2]string{{"bwrap", p.Bwrap}, {"socat", p.Socat}} {
		if t[1] == "" {
			ev = append(ev, "host:"+t[0]+" not found on the provider's PATH")
		} else {
			ev = append(ev, "host:"+t[0]+" "+t[1])
		}
	}
	if p.BundledBwrap != "" {
		ev = append(ev, "bundled:bwrap "+p.BundledBwrap)
	}
	return ev
}

// ProbeOptions configure Probe.
type ProbeOptions struct {
	// CacheDir holds the probe cache (probe-v1.json). Default: the user
	// cache directory's polc folder; "-" disables the on-disk cache.
	CacheDir string
	// SearchPath is the PATH used to find host tools (bwrap, socat, node).
	// Default: the process's PATH.
	SearchPath string
}

// versionPatterns parse `--version` stdout (docs/agent-clis.md "Versions
// and probes").
var versionPatterns = map[string]*regexp.Regexp{
	"claude-code": regexp.MustCompile(`^(\d+\.\d+\.\d+)\s+\(Claude Code\)$`),
	"codex":       regexp.MustCompile(`^codex-cli (\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)$`),
	"gemini-cli":  regexp.MustCompile(`^(\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?)$`),
}

// binaries are the executable names of the providers.
var binaries = map[string]string{"claude-code": "claude", "codex": "codex", "gemini-cli": "gemini"}

// ProviderPackages are the npm packages and versions the capability
// tables were established on; .ci/install-providers installs them.
var ProviderPackages = map[string]string{
	"claude-code": "@anthropic-ai/claude-code@2.1.328",
	"codex":       "@openai/codex@0.169.0",
	"gemini-cli":  "@google/gemini-cli@0.61.0",
}

// ProbeError is returned when an executable cannot be found or run, or
// prints no recognisable version.
type ProbeError struct {
	Provider, Executable string
	Err                  error
}

func (e *ProbeError) Error() string {
	return fmt.Sprintf("probe %s (%s): %v", e.Provider, e.Executable, e.Err)
}

func (e *ProbeError) Unwrap() error { return e.Err }

// FindExecutable locates a provider's CLI: on PATH, then in the providers
// cache that .ci/install-providers fills ($POLC_PROVIDERS_DIR, default
// ~/.cache/polc/providers).
func FindExecutable(provider string) (string, error) {
	bin, ok := binaries[provider]
	if !ok {
		return "", fmt.Errorf("unknown provider %q (want one of %s)", provider, strings.Join(Providers, ", "))
	}
	if p, err := exec.LookPath(bin); err == nil {
		return filepath.Abs(p)
	}
	if p := CachedExecutable(provider); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("%s not found on PATH or in %s (run .ci/install-providers)", bin, ProvidersDir())
}

// ProvidersDir is where .ci/install-providers installs the pinned CLIs.
func ProvidersDir() string {
	if d := os.Getenv("POLC_PROVIDERS_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "polc", "providers")
}

// CachedExecutable returns the pinned CLI installed by
// .ci/install-providers, or "" when it is not there.
func CachedExecutable(provider string) string {
	pkg, ok := ProviderPackages[provider]
	if !ok {
		return ""
	}
	_, ver, _ := strings.Cut(pkg[1:], "@")
	p := filepath.Join(ProvidersDir(), provider+"-"+ver, "node_modules", ".bin", binaries[provider])
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p
	}
	return ""
}

var (
	hashMu    sync.Mutex
	hashMemo  = map[string]string{} // path|size|mtime|identity → sha256
	probeMemo = map[string]string{} // provider|path|sha256 → version
)

func fileSHA256(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	key := fmt.Sprintf("%s|%d|%d|%s", path, fi.Size(), fi.ModTime().UnixNano(), fileIdentity(fi))
	hashMu.Lock()
	h, ok := hashMemo[key]
	hashMu.Unlock()
	if ok {
		return h, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", err
	}
	h = hex.EncodeToString(sum.Sum(nil))
	hashMu.Lock()
	hashMemo[key] = h
	hashMu.Unlock()
	return h, nil
}

// Probe identifies a provider CLI: it hashes the executable and runs
// `EXE --version` (stdout only is parsed), unless the cache already holds
// the version for this path and hash. The version is then looked up in the
// provider's capability table; an unknown version is reported unsupported,
// not an error.
func Probe(ctx context.Context, provider, executable string, opts ProbeOptions) (*ProbeResult, error) {
	re, ok := versionPatterns[provider]
	if !ok {
		return nil, &ProbeError{provider, executable, fmt.Errorf("unknown provider (want one of %s)", strings.Join(Providers, ", "))}
	}
	if executable == "" {
		var err error
		if executable, err = FindExecutable(provider); err != nil {
			return nil, &ProbeError{provider, binaries[provider], err}
		}
	}
	abs, err := filepath.Abs(executable)
	if err != nil {
		return nil, &ProbeError{provider, executable, err}
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, &ProbeError{provider, executable, err}
	}
	sha, err := fileSHA256(resolved)
	if err != nil {
		return nil, &ProbeError{provider, executable, err}
	}
	r := &ProbeResult{Provider: provider, Executable: abs, Resolved: resolved, SHA256: sha}
	searchPath := opts.SearchPath
	if searchPath == "" {
		searchPath = os.Getenv("PATH")
	}
	if isNodeScript(resolved) {
		r.Node = lookPath("node", searchPath)
		if r.Node == "" {
			return nil, &ProbeError{provider, executable, errors.New("a Node.js script, but node is not on PATH")}
		}
	}
	// The helpers a spawn gets are the ones on the provider's PATH, not
	// polc's: look on both, and test each bubblewrap found (once).
	r.InheritedPath = searchPath
	works := map[string]string{}
	working := func(path string) string {
		if path == "" {
			return ""
		}
		if _, ok := works[path]; !ok {
			works[path] = workingBwrap(ctx, path)
		}
		return works[path]
	}
	r.Bwrap = working(lookPath("bwrap", providerPath(r.Node)))
	r.Socat = lookPath("socat", providerPath(r.Node))
	r.InheritedBwrap = working(lookPath("bwrap", searchPath))
	r.InheritedSocat = lookPath("socat", searchPath)
	if provider == "codex" {
		r.BundledBwrap = working(bundledBwrap(resolved))
	}

	// A Node.js CLI is a script that loads (or, for Codex, spawns) code
	// the script's hash does not cover, and Codex's shim is the same file
	// in every release: its package's package.json (which names the
	// version and pins the platform binary) is part of the cache key.
	cacheSHA := sha
	if r.Node != "" {
		if pj := packageJSONSHA256(resolved); pj != "" {
			cacheSHA += "+package.json:" + pj
		}
	}
	key := provider + "|" + abs + "|" + cacheSHA
	cache := probeCache(opts.CacheDir)
	hashMu.Lock()
	ver, hit := probeMemo[key]
	hashMu.Unlock()
	if !hit && cache != "" {
		ver, hit = readProbeCache(cache)[key]
	}
	if hit {
		r.Version, r.Cached = ver, true
	} else {
		out, err := runVersion(ctx, provider, abs, r.Node)
		if err != nil {
			return nil, &ProbeError{provider, executable, err}
		}
		line := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(line, '\n'); i >= 0 {
			line = strings.TrimSpace(line[i+1:])
		}
		m := re.FindStringSubmatch(line)
		if m == nil {
			return nil, &ProbeError{provider, executable, fmt.Errorf("--version printed %q, which is not a %s version", truncate(line, 200), provider)}
		}
		r.Version = m[1]
		hashMu.Lock()
		probeMemo[key] = r.Version
		hashMu.Unlock()
		if cache != "" {
			writeProbeCache(cache, key, r.Version)
		}
	}
	if t := Tables[provider]; t.Supports(r.Version) {
		r.Supported = true
	} else {
		r.Reason = fmt.Sprintf("%s %s has no capability table (tables cover %s): every control is unsupported", provider, r.Version, strings.Join(t.Versions, ", "))
	}
	return r, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func lookPath(name, path string) string {
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// packageJSONSHA256 hashes the package.json of the npm package that holds
// script (the nearest one above it), or returns "" when there is none.
func packageJSONSHA256(script string) string {
	dir := filepath.Dir(script)
	for range 4 {
		if h, err := fileSHA256(filepath.Join(dir, "package.json")); err == nil {
			return h
		}
		parent := filepath.Dir(dir)
		if parent == dir || filepath.Base(dir) == "node_modules" {
			break
		}
		dir = parent
	}
	return ""
}

func isNodeScript(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 128)
	n, _ := f.Read(head)
	first, _, _ := bytes.Cut(head[:n], []byte("\n"))
	return bytes.HasPrefix(first, []byte("#!")) && bytes.Contains(first, []byte("node"))
}

// bundledBwrap finds the bubblewrap Codex ships in its platform package
// (@openai/codex-<os>-<arch>/vendor/<triple>/codex-resources/bwrap), from
// the resolved codex.js shim; "" when there is none.
func bundledBwrap(resolved string) string {
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	if arch == "" {
		return ""
	}
	dir := filepath.Dir(resolved)
	for range 6 {
		for _, nm := range []string{filepath.Join(dir, "node_modules"), dir} {
			matches, _ := filepath.Glob(filepath.Join(nm, "@openai", "codex-"+runtime.GOOS+"-"+arch, "vendor", "*", "codex-resources", "bwrap"))
			if len(matches) > 0 {
				slices.Sort(matches)
				return matches[0]
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

// workingBwrap returns path when bubblewrap can create a sandbox here (it
// needs user namespaces), "" otherwise.
func workingBwrap(ctx context.Context, path string) string {
	if path == "" {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "true")
	if cmd.Run() != nil {
		return ""
	}
	return path
}

// runVersion runs `EXE --version` in a throw-away HOME, so that a CLI that
// writes state on start (Gemini writes ~/.gemini/projects.json) leaves
// nothing behind, and returns stdout.
func runVersion(ctx context.Context, provider, exe, node string) ([]byte, error) {
	home, err := os.MkdirTemp("", "polc-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "--version")
	cmd.Dir = home
	cmd.Env = []string{"HOME=" + home, "PATH=" + providerPath(node), "CODEX_HOME=" + filepath.Join(home, ".codex"),
		"GEMINI_CLI_HOME=" + home, "GEMINI_CLI_NO_RELAUNCH=1", "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "NO_COLOR=1"}
	os.MkdirAll(filepath.Join(home, ".codex"), 0o700)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s --version: %v (stderr: %s)", filepath.Base(exe), err, truncate(strings.TrimSpace(stderr.String()), 300))
	}
	return stdout.Bytes(), nil
}

// basePath is the PATH a provider gets (after the node directory).
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func providerPath(node string) string {
	if node == "" {
		return basePath
	}
	return filepath.Dir(node) + ":" + basePath
}

func probeCache(dir string) string {
	switch dir {
	case "-":
		return ""
	case "":
		d, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(d, "polc")
	}
	return filepath.Join(dir, "probe-v1.json")
}

type probeCacheFile struct {
	Entries []probeCacheEntry `json:"entries"`
}

type probeCacheEntry struct {
	Provider   string `json:"provider"`
	Executable string `json:"executable"`
	SHA256     string `json:"sha256"`
	Version    string `json:"version"`
}

func readProbeCache(path string) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	var f probeCacheFile
	if json.Unmarshal(data, &f) != nil {
		return out // a damaged cache is a miss, never an error
	}
	for _, e := range f.Entries {
		out[e.Provider+"|"+e.Executable+"|"+e.SHA256] = e.Version
	}
	return out
}

func writeProbeCache(path, key, version string) {
	entries := readProbeCache(path)
	entries[key] = version
	var f probeCacheFile
	for k, v := range entries {
		parts := strings.SplitN(k, "|", 3)
		if len(parts) == 3 {
			f.Entries = append(f.Entries, probeCacheEntry{parts[0], parts[1], parts[2], v})
		}
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return
	}
	if os.MkdirAll(filepath.Dir(path), 0o700) == nil {
		atomicfile.WriteFile(path, data, 0o600) // best effort: a cache
	}
}
