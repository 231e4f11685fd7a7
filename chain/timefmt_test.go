package chain

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestFormatTimeMatchesTimeFormat checks the hand-written formatter against
// time.Time.Format over random instants in every era the time package
// represents (years below 0, below 1000 and above 9999 included), around
// year, month and day boundaries, with zero and full fractions, sub-
// microsecond nanoseconds (truncated, not rounded) and non-UTC zones.
func TestFormatTimeMatchesTimeFormat(t *testing.T) {
	check := func(tm time.Time) {
		t.Helper()
		want := tm.UTC().Format(TimeFormat)
		if got := FormatTime(tm); got != want {
			t.Fatalf("FormatTime(%v) = %q, want %q", tm, got, want)
		}
		if got := string(appendTime([]byte("x"), tm)); got != "x"+want {
			t.Fatalf("appendTime(%v) = %q, want %q", tm, got, "x"+want)
		}
		// Again within the same second: the cached text of the second
		// and new microseconds.
		same := tm.Truncate(time.Second).Add(time.Duration(tm.Nanosecond()/3) + 7*time.Microsecond)
		if same.Unix() == tm.Unix() {
			if got, want := FormatTime(same), same.UTC().Format(TimeFormat); got != want {
				t.Fatalf("FormatTime(%v) after %v = %q, want %q", same, tm, got, want)
			}
		}
	}
	zones := []*time.Location{time.UTC, time.FixedZone("east", 14*3600), time.FixedZone("west", -(12*3600 + 1800)), time.FixedZone("odd", 345)}
	years := []int{-100000, -1, 0, 1, 9, 99, 100, 999, 1000, 1969, 1970, 1999, 2000, 2024, 2026, 9998, 9999, 10000, 12345, 292277026}
	nanos := []int{0, 1, 999, 1000, 1001, 999999, 999999999, 123456789, 500000000}
	for _, y := range years {
		for _, mo := range []time.Month{1, 2, 12} {
			for _, d := range []int{1, 28, 29, 31} {
				for _, ns := range nanos {
					for _, z := range zones {
						check(time.Date(y, mo, d, 0, 0, 0, ns, z))
						check(time.Date(y, mo, d, 23, 59, 59, ns, z))
					}
				}
			}
		}
		// The last and first instants of the year, in UTC.
		check(time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Nanosecond))
		check(time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC))
	}
	// Every day of years around the civil algorithm's corners (year 0
	// starts in a leap year before its first March; centuries; the last
	// year written by hand).
	for _, y := range []int{0, 1, 4, 100, 400, 1600, 1900, 2000, 2100, 9999} {
		for d := time.Date(y, 1, 1, 12, 34, 56, 789012345, time.UTC); d.Year() == y; d = d.AddDate(0, 0, 1) {
			check(d)
		}
	}
	check(time.Time{})
	check(time.Unix(0, 0))
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		var tm time.Time
		switch rng.IntN(3) {
		case 0: // any representable-by-Unix instant, years far outside 0..9999 included
			tm = time.Unix(rng.Int64N(1<<40)-1<<39, rng.Int64N(1e9))
		case 1: // years 0..9999
			tm = time.Date(rng.IntN(10000), time.Month(1+rng.IntN(12)), 1+rng.IntN(31), rng.IntN(24), rng.IntN(60), rng.IntN(60), rng.IntN(1e9), time.UTC)
		default: // around now, with a random zone
			tm = time.Unix(1.7e9+rng.Int64N(1e9), rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))])
		}
		check(tm)
	}
}

// BenchmarkFormatTime compares FormatTime with the time package's
// formatter it replaces.
func BenchmarkFormatTime(b *testing.B) {
	tm := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	var buf []byte
	b.Run("appendTime", func(b *testing.B) {
		for b.Loop() {
			buf = appendTime(buf[:0], tm)
		}
	})
	b.Run("AppendFormat", func(b *testing.B) {
		for b.Loop() {
			buf = tm.UTC().AppendFormat(buf[:0], TimeFormat)
		}
	})
}
