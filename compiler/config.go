package compiler

import (
	"os"
	"path/filepath"
	"time"

	"polc.dev/polc/snapshot"
)

// Config controls loading and compilation.
type Config struct {
	// Dir is the working directory: relative input paths are resolved
	// against it and positions are printed relative to it. Default: the
	// process working directory.
	Dir string
	// Parents are parent snapshots, by name, that policies in the compile
	// set may extend (polc compile --parent).
	Parents []*snapshot.Snapshot
	// Sign, when set, signs the emitted Rego bundle in OPA's format.
	Sign *SigningConfig
	// Now is the compile time used only for warnings about expired
	// policies; it never enters a snapshot. Default: time.Now.
	Now func() time.Time
	// Stage, when set, is called with each stage's name (load, validate,
	// resolve, lower, emit) as it begins, so that a command can show
	// progress on a long compile.
	Stage func(name string)
}

func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir, _ = os.Getwd()
	}
	if abs, err := filepath.Abs(c.Dir); err == nil {
		c.Dir = abs
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
