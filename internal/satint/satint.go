// Package satint is saturating int64 arithmetic: usage totals and budget
// window ends must clamp, never wrap, whatever a request claims.
package satint

import "math"

// Add adds two int64 values, saturating at either end.
func Add(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}
