package chain_test

import (
	"crypto/ed25519"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

// edwards25519 in affine coordinates with math/big: slow and obviously
// correct, to check the small-order blocklist independently.
var (
	fp    = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	edD   = new(big.Int).Mod(new(big.Int).Mul(big.NewInt(-121665), new(big.Int).ModInverse(big.NewInt(121666), fp)), fp)
	sqrtM = new(big.Int).Exp(big.NewInt(2), new(big.Int).Div(new(big.Int).Sub(fp, big.NewInt(1)), big.NewInt(4)), fp)
)

func fmod(x *big.Int) *big.Int    { return new(big.Int).Mod(x, fp) }
func fmul(a, b *big.Int) *big.Int { return fmod(new(big.Int).Mul(a, b)) }
func finv(a *big.Int) *big.Int    { return new(big.Int).ModInverse(a, fp) }

func decodePoint(b []byte) (x, y *big.Int, ok bool) {
	le := make([]byte, 32)
	for i := range 32 {
		le[31-i] = b[i]
	}
	sign := le[0] >> 7
	le[0] &= 0x7f
	y = fmod(new(big.Int).SetBytes(le))
	y2 := fmul(y, y)
	u := fmod(new(big.Int).Sub(y2, big.NewInt(1)))
	v := fmod(new(big.Int).Add(fmul(edD, y2), big.NewInt(1)))
	x2 := fmul(u, finv(v))
	x = new(big.Int).Exp(x2, new(big.Int).Div(new(big.Int).Add(fp, big.NewInt(3)), big.NewInt(8)), fp)
	if fmul(x, x).Cmp(x2) != 0 {
		x = fmul(x, sqrtM)
	}
	if fmul(x, x).Cmp(x2) != 0 {
		return nil, nil, false
	}
	if x.Bit(0) != uint(sign) {
		x = fmod(new(big.Int).Neg(x))
	}
	return x, y, true
}

func add(x1, y1, x2, y2 *big.Int) (*big.Int, *big.Int) {
	t := fmul(edD, fmul(fmul(x1, x2), fmul(y1, y2)))
	x3 := fmul(fmod(new(big.Int).Add(fmul(x1, y2), fmul(y1, x2))), finv(fmod(new(big.Int).Add(big.NewInt(1), t))))
	y3 := fmul(fmod(new(big.Int).Add(fmul(y1, y2), fmul(x1, x2))), finv(fmod(new(big.Int).Sub(big.NewInt(1), t))))
	return x3, y3
}

func hasSmallOrder(b []byte) bool {
	x, y, ok := decodePoint(b)
	if !ok {
		return false
	}
	for range 3 {
		x, y = add(x, y, x, y)
	}
	return x.Sign() == 0 && y.Cmp(big.NewInt(1)) == 0
}

func TestSmallOrderBlocklist(t *testing.T) {
	for _, enc := range []string{
		"0000000000000000000000000000000000000000000000000000000000000000",
		"0100000000000000000000000000000000000000000000000000000000000000",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
	} {
		h, _ := chain.ParseHash(enc)
		if !hasSmallOrder(h[:]) {
			t.Errorf("%s: not of small order by the reference arithmetic", enc)
		}
		if !chain.IsSmallOrder(h[:]) {
			t.Errorf("%s: not in the blocklist", enc)
		}
	}
	pub := evidencegen.LogKey.VKey
	tr, err := chain.ParseTrust([]byte("log " + pub + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if chain.IsSmallOrder(tr.Keys[0].Public) || hasSmallOrder(tr.Keys[0].Public) {
		t.Fatal("a real key is reported as small order")
	}
}

func TestParseTrust(t *testing.T) {
	lk, ck := evidencegen.LogKey.VKey, evidencegen.CertifierKey.VKey
	tr, err := chain.ParseTrust([]byte("# keys\n\nlog " + lk + " valid_from=2026-01-01T00:00:00Z # trailing comment\ncertifier\t" + ck + " valid_until=2027-01-01T00:00:00.5Z\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Keys) != 2 || tr.Keys[0].Role != chain.RoleLog || tr.Keys[1].Role != chain.RoleCertifier || tr.Keys[0].Line != 3 {
		t.Fatalf("keys %+v", tr.Keys)
	}
	k := tr.Keys[1]
	edge := time.Date(2027, 1, 1, 0, 0, 0, 500000000, time.UTC)
	if !k.ValidAt(edge) || k.ValidAt(edge.Add(time.Nanosecond)) {
		t.Fatal("valid_until is not a closed bound")
	}
	pub := make(ed25519.PublicKey, 32)
	pub[0] = 1
	weak, _ := note.NewEd25519VerifierKey("weak", pub)
	for name, bad := range map[string]string{
		"unknown role":   "witness " + lk,
		"no vkey":        "log",
		"bad vkey":       "log a+00000000+AQ==",
		"small order":    "log " + weak,
		"unknown option": "log " + lk + " expires=2026-01-01T00:00:00Z",
		"repeated":       "log " + lk + " valid_from=2026-01-01T00:00:00Z valid_from=2026-01-01T00:00:00Z",
		"bad time":       "log " + lk + " valid_from=yesterday",
		"empty window":   "log " + lk + " valid_from=2027-01-01T00:00:00Z valid_until=2026-01-01T00:00:00Z",
		"duplicate":      "log " + lk + "\ncertifier " + lk,
		"no keys":        "# none",
		"crlf":           "log " + lk + "\r",
	} {
		if _, err := chain.ParseTrust([]byte(bad + "\n")); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "trust file line") {
			t.Errorf("%s: error %q does not name a line", name, err)
		}
	}
}

// TestNewUUID checks that generated ids are lowercase version-4 UUIDs that
// records accept, and that they do not repeat: across batch boundaries
// and between goroutines sharing the batches (run it with -race).
func TestNewUUID(t *testing.T) {
	const workers, each = 8, 1000
	got := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				got[w] = append(got[w], chain.NewUUID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, ids := range got {
		for _, id := range ids {
			if !chain.IsUUID(id) || id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) {
				t.Fatalf("NewUUID() = %q: not a lowercase version-4 UUID", id)
			}
			if seen[id] {
				t.Fatalf("NewUUID repeated %q", id)
			}
			seen[id] = true
		}
	}
}
