package executor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Admission is the capacity port (stage 3): it admits an attempt or says
// when to retry. It never produces a policy decision or a gate result.
type Admission interface {
	// Acquire returns a lease, or ok=false and when to retry. It must not
	// block waiting for capacity: deferral is the caller's to schedule.
	// now is the executor's clock reading for this admission: leases,
	// expiries and rates follow the clock the executor was configured
	// with (a deterministic one in tests), not the wall clock.
	Acquire(ctx context.Context, now time.Time) (lease Lease, retryAt time.Time, ok bool)
}

// Lease is admitted capacity; Release must be called exactly once.
type Lease struct {
	ID        string
	ExpiresAt time.Time
	release   interface{ release() }
}

// Release returns the capacity.
func (l Lease) Release() {
	if l.release != nil {
		l.release.release()
	}
}

// DefaultLeaseTTL is a Limiter's lease lifetime when its LeaseTTL is 0.
const DefaultLeaseTTL = 5 * time.Minute

// Limiter bounds concurrency and rate: at most MaxConcurrent attempts in
// flight and Rate admissions per second (with bursts of Burst). A zero
// field means no bound of that kind. Set the fields before the first
// Acquire and leave them; one Limiter may serve several executors, which
// then share its bounds.
type Limiter struct {
	// MaxConcurrent bounds the attempts holding a lease (0: no bound).
	MaxConcurrent int
	// Rate is the admissions per second (0: no bound).
	Rate float64
	// Burst is how many admissions Rate allows at once (at least 1).
	Burst int
	// LeaseTTL is how long a lease (and its preflight report) stays
	// valid: 0 means DefaultLeaseTTL. It must not be negative: such a
	// lease has expired when granted, and the governed profiles refuse
	// it at stage 4 (preflight_expired).
	LeaseTTL time.Duration
	// IDs mints lease ids, which preflight reports bind (LeaseID). nil
	// leaves them empty: the Limiter New makes when Config.Admission is
	// nil uses Config.IDs, but one the composition root builds must be
	// given its ids (executor.NewUUID, say).
	IDs func() string

	mu       sync.Mutex
	inFlight int
	tokens   float64
	last     time.Time
}

// Acquire implements Admission.
func (l *Limiter) Acquire(_ context.Context, t time.Time) (Lease, time.Time, bool) {
	ttl := l.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	id := ""
	if l.IDs != nil {
		id = l.IDs()
	}
	if l.MaxConcurrent <= 0 && l.Rate <= 0 {
		// Unbounded: nothing to count, nothing to give back.
		return Lease{ID: id, ExpiresAt: t.Add(ttl)}, time.Time{}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.MaxConcurrent > 0 && l.inFlight >= l.MaxConcurrent {
		return Lease{}, t.Add(10 * time.Millisecond), false
	}
	if l.Rate > 0 {
		burst := float64(max(l.Burst, 1))
		if l.last.IsZero() {
			l.tokens = burst
		} else {
			l.tokens = min(burst, l.tokens+t.Sub(l.last).Seconds()*l.Rate)
		}
		l.last = t
		if l.tokens < 1 {
			wait := time.Duration((1 - l.tokens) / l.Rate * float64(time.Second))
			return Lease{}, t.Add(wait), false
		}
		l.tokens--
	}
	l.inFlight++
	return Lease{ID: id, ExpiresAt: t.Add(ttl), release: &limiterLease{l: l}}, time.Time{}, true
}

// limiterLease gives one admission back to its Limiter, once.
type limiterLease struct {
	l    *Limiter
	done atomic.Bool
}

func (r *limiterLease) release() {
	if r.done.CompareAndSwap(false, true) {
		r.l.mu.Lock()
		r.l.inFlight--
		r.l.mu.Unlock()
	}
}
