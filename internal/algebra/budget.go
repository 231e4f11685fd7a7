package algebra

import (
	"context"
	"errors"
)

// Budget bounds the work of searches (docs/prove.md, "Budget"), in
// units: a state of an automaton computed in the product, or compared
// with one kept, costs one, and a combination of states kept eight more
// (its bookkeeping, in units of a state's 8 bytes). So it bounds both the
// time and the memory of a question — what a search keeps is at most 8
// bytes a unit, twice that with the slack of growing slices — and, being
// counted rather than timed, gives the same answer on every machine. A
// context, when given, is checked when the first unit is spent and then
// every few thousand, so that a deadline or a cancellation stops a search
// too. A Budget is used by one goroutine at a time.
type Budget struct {
	ctx   context.Context
	left  int64
	total int64
	tick  int64
}

// DefaultBudget is the work a query without a Budget may do: at most
// about 160 MB of product states kept (320 MB of heap), and seconds.
const DefaultBudget = 20_000_000

// ErrTooLarge is Solve's error when the search would need more work than
// its budget: the question is left undecided, never answered by a guess.
var ErrTooLarge = errors.New("algebra: the search exceeds its work bound; the question is undecided")

// NewBudget returns a budget of the given units, checking ctx (nil: none)
// as they are spent.
func NewBudget(ctx context.Context, units int64) *Budget {
	return &Budget{ctx: ctx, left: units, total: units, tick: ctxEvery} // the first spend looks
}

// Total is the number of units the budget was given.
func (b *Budget) Total() int64 { return b.total }

// Spent is the number of units used so far.
func (b *Budget) Spent() int64 { return b.total - max(b.left, 0) }

// Exhausted reports whether the budget was overrun: some search that
// shared it gave up with ErrTooLarge.
func (b *Budget) Exhausted() bool { return b.left < 0 }

// ctxEvery is how many units are spent between two looks at the
// context: a few milliseconds of work.
const ctxEvery = 1 << 14

// spend takes n units: ErrTooLarge once the budget is overrun, the
// context's error once it is done.
func (b *Budget) spend(n int64) error {
	b.left -= n
	if b.left < 0 {
		return ErrTooLarge
	}
	if b.ctx != nil {
		if b.tick += n; b.tick >= ctxEvery {
			b.tick = 0
			if err := b.ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}
