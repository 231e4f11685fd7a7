package chain_test

import (
	"bytes"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/chain/storetest"
)

// subjects are the stores of this package under the conformance suite
// (package pgstore runs it against PostgreSQL).
func subjects() map[string]storetest.Subject {
	return map[string]storetest.Subject{
		"mem": {
			Open:   func(t *testing.T) chain.Store { return chain.NewMemStore() },
			Export: func(t *testing.T, s chain.Store, id string) []byte { return s.(*chain.MemStore).Export(id) },
		},
		"file": {
			Open: func(t *testing.T) chain.Store {
				s, err := chain.OpenFileStore(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			},
			Export: func(t *testing.T, s chain.Store, id string) []byte {
				var b bytes.Buffer
				if err := s.(*chain.FileStore).Export(id, &b); err != nil {
					t.Fatal(err)
				}
				return b.Bytes()
			},
		},
	}
}

func TestStoreConformance(t *testing.T) {
	for name, s := range subjects() {
		t.Run(name, func(t *testing.T) { storetest.Run(t, s) })
	}
}

func TestConcurrentStoreConformance(t *testing.T) {
	for name, s := range subjects() {
		t.Run(name, func(t *testing.T) { storetest.RunConcurrent(t, s) })
	}
}
