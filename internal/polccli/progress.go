package polccli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
)

// progressDelay is how long a command runs before it shows progress: a
// first vet or compile (CUE's evaluator warming up, many files) can take
// long enough that a silent terminal looks hung.
const progressDelay = 2 * time.Second

// progress shows "polc CMD: STAGE… Ns" on standard error, rewritten in
// place each second, once a command has run for progressDelay — and only
// when standard error is a terminal, so pipes, CI logs and the goldens
// (which run without one) never see it. stop erases the line.
type progress struct {
	w     io.Writer
	cmd   string
	start time.Time
	delay time.Duration
	mu    sync.Mutex
	stage string
	shown bool
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
}

// startProgress returns nil when standard error is not a terminal; a nil
// *progress is ready to use and does nothing.
func startProgress(e *env, cmd string) *progress {
	f, ok := e.stderr.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return nil
	}
	return newProgress(f, cmd, progressDelay)
}

func newProgress(w io.Writer, cmd string, delay time.Duration) *progress {
	p := &progress{w: w, cmd: cmd, start: time.Now(), delay: delay, done: make(chan struct{})}
	p.wg.Add(1)
	go p.loop()
	return p
}

// setStage records what the command is doing (compiler.Config.Stage).
func (p *progress) setStage(name string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stage = name
	p.mu.Unlock()
}

func (p *progress) loop() {
	defer p.wg.Done()
	timer := time.NewTimer(p.delay)
	defer timer.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-timer.C:
		}
		p.mu.Lock()
		fmt.Fprintf(p.w, "\r\x1b[Kpolc %s: %s… %ds", p.cmd, p.stage, int(time.Since(p.start).Seconds()))
		p.shown = true
		p.mu.Unlock()
		timer.Reset(time.Second)
	}
}

// stop ends the progress line before the command prints its results;
// calls after the first do nothing.
func (p *progress) stop() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		close(p.done)
		p.wg.Wait()
		if p.shown {
			fmt.Fprint(p.w, "\r\x1b[K")
		}
	})
}
