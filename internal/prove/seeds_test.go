package prove_test

import "testing"

func TestSeedsTmp(t *testing.T) {
	for seed := uint64(20); seed < 28; seed++ {
		t.Run("", func(t *testing.T) { randomProve(t, seed, 30, 300) })
	}
}
