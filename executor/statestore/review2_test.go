package statestore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"polc.dev/polc/executor/statestore/internal/fixture"
)

// Stored times sort as text in time order: ORDER BY started_at (or
// created_at) is time order. time.RFC3339Nano drops trailing fraction
// zeros, so a whole second ("…:21Z") sorted after the same second and a
// half ("…:21.5Z"), and ".1Z" after ".15Z".
func TestStoredTimesSortAsText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	base := time.Date(2026, 11, 30, 7, 28, 21, 0, time.UTC)
	offsets := []time.Duration{ // committed in this order
		500 * time.Millisecond,
		0,
		150 * time.Millisecond,
		100 * time.Millisecond,
		time.Second + 123456789,
		time.Nanosecond,
	}
	var want []string
	for i, off := range offsets {
		a := fixture.Attempt("run-"+string(rune('a'+i)), "t"+string(rune('a'+i)))
		a.StartedAt, a.FinishedAt = base.Add(off), base.Add(off)
		fixture.MustCommit(t, s, a)
		want = append(want, a.AttemptID)
	}
	slices.SortFunc(want, func(x, y string) int {
		return int(offsets[x[1]-'a'] - offsets[y[1]-'a'])
	})
	db := raw(t, s.Path())
	for _, q := range []string{
		"SELECT attempt_id FROM attempts ORDER BY started_at",
		"SELECT attempt_id FROM attempts ORDER BY finished_at",
		"SELECT 't' || substr(run_id, 5) FROM runs ORDER BY created_at",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			got = append(got, id)
		}
		rows.Close()
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", q, got, want)
		}
	}
	// And the times still read back exactly.
	for i, off := range offsets {
		a, ok, err := s.Attempt(ctx, "t"+string(rune('a'+i)))
		if err != nil || !ok || !a.StartedAt.Equal(base.Add(off)) {
			t.Errorf("attempt %d: %v ok=%v err=%v, want %v", i, a.StartedAt, ok, err, base.Add(off))
		}
	}
}

// A time without an RFC 3339 form (a year outside 0-9999) is refused as
// input. It was committed, and then every read of the attempt or its run
// failed to parse it: a commit the store reported but could not return.
func TestCommitAttemptRefusesUnstorableTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t)
	for i, at := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 0, time.UTC),
	} {
		for _, finished := range []bool{false, true} {
			a := fixture.Attempt("run-y", "y"+string(rune('0'+i))+map[bool]string{false: "s", true: "f"}[finished], "m-"+string(rune('0'+i))+map[bool]string{false: "s", true: "f"}[finished])
			if finished {
				a.FinishedAt = at
			} else {
				a.StartedAt = at
			}
			var ie *InputError
			if err := s.CommitAttempt(ctx, a); !errors.As(err, &ie) {
				got, ok, rerr := s.Attempt(ctx, a.AttemptID)
				t.Errorf("%v (finished=%v): commit err = %v, want InputError (read back: %v ok=%v err=%v)", at, finished, err, got.StartedAt, ok, rerr)
				continue
			}
			absent(t, s, a)
		}
	}
	// The bounds themselves are storable and round-trip.
	a := fixture.Attempt("run-z", "z")
	a.StartedAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	a.FinishedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	fixture.MustCommit(t, s, a)
	got, ok, err := s.Attempt(ctx, "z")
	if err != nil || !ok || !got.StartedAt.Equal(a.StartedAt) || !got.FinishedAt.Equal(a.FinishedAt) {
		t.Errorf("bounds: %v %v ok=%v err=%v", got.StartedAt, got.FinishedAt, ok, err)
	}
}
