package chain

import (
	"fmt"
	"testing"
)

// TestUUIDText checks the UUID formatter against plain formatting of the
// five groups, and that new ids are version 4 UUIDs that parse back.
func TestUUIDText(t *testing.T) {
	for k := range 256 {
		var u uuid
		for i := range u {
			u[i] = byte(k*31 + i*97)
		}
		want := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		if got := u.String(); got != want {
			t.Fatalf("uuid %x = %s, want %s", u, got, want)
		}
	}
	b := appendNewUUIDs([]byte("prefix"), 3)
	if len(b) != len("prefix")+3*36 || string(b[:6]) != "prefix" {
		t.Fatalf("appendNewUUIDs appended %d bytes", len(b)-6)
	}
	for i := range 3 {
		id := string(b[6+i*36 : 6+(i+1)*36])
		if !IsUUID(id) || id[14] != '4' || parseUUID([]byte(id)).String() != id {
			t.Fatalf("id %q is not a version 4 UUID", id)
		}
	}
}

// BenchmarkNewUUID measures minting one id, as the executor and the
// Writer do for every attempt and record.
func BenchmarkNewUUID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if len(NewUUID()) != 36 {
			b.Fatal("bad id")
		}
	}
}
