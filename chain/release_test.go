package chain

import (
	"bytes"
	"os"
	"testing"
)

// TestFileStoreReleaseAndExport: a chain's file holds the store's reserve
// (zeros) while it is open, so a copy of it failed verification as a torn
// tail, and every closed task kept a file, a lock and megabytes of reserve
// until the whole store closed. Export gives the durable records of an
// open chain; Release makes the file end with its last record and gives
// back the descriptors; the chain opens again on the next append.
func TestFileStoreReleaseAndExport(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	smallReserve(s)
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 3)
	waitReserve(t, s, testChain)
	path := s.path(testChain)

	var open bytes.Buffer
	if err := s.Export(testChain, &open); err != nil {
		t.Fatal(err)
	}
	res, err := Verify(bytes.NewReader(open.Bytes()), VerifyOptions{ExpectedHead: &rcs[2].HeadHash})
	if err != nil || !res.OK() || res.Records != 3 || res.TornTail {
		t.Fatalf("export of the open chain: %+v %v", res.Findings, err)
	}
	if reserveSupported && fileSize(t, path) <= int64(open.Len()) {
		t.Fatalf("no reserve to leave out: file %d bytes, export %d", fileSize(t, path), open.Len())
	}

	if err := s.Release(testChain); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(data, open.Bytes()) {
		t.Fatalf("released file is %d bytes (%v), want the %d exported", len(data), err, open.Len())
	}
	s.mu.Lock()
	_, held := s.chains[testChain]
	s.mu.Unlock()
	if held {
		t.Error("the store still holds the released chain")
	}
	// The lock is free: another store can write the chain now.
	s2, err := OpenFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	rcs = append(rcs, appendN(t, s2, ids, testChain, 1)...)
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	// And the first store opens it again for its next append.
	rcs = append(rcs, appendN(t, s, ids, testChain, 1)...)
	var after bytes.Buffer
	if err := s.Export(testChain, &after); err != nil {
		t.Fatal(err)
	}
	res, err = Verify(bytes.NewReader(after.Bytes()), VerifyOptions{ExpectedHead: &rcs[4].HeadHash})
	if err != nil || !res.OK() || res.Records != 5 {
		t.Fatalf("after release and two appends: %+v %v", res.Findings, err)
	}
	if err := s.Release(testChain2); err != nil {
		t.Errorf("releasing a chain that is not open: %v", err)
	}
	var none bytes.Buffer
	if err := s.Export(testChain2, &none); err != nil || none.Len() != 0 {
		t.Errorf("export of a missing chain: %d bytes, %v", none.Len(), err)
	}
}

// TestVerifyZeroTailSaysReserve: a chain file copied while a store wrote
// it ends in the reserve's zeros. It is still torn_tail (the file is not
// the chain as released), but the message used to call it an interrupted
// append; it now says what the zeros are, whether they fill the read
// buffer or not.
func TestVerifyZeroTailSaysReserve(t *testing.T) {
	s := NewMemStore()
	ids := &testIDs{}
	rcs := appendN(t, s, ids, testChain, 2)
	for _, n := range []int{10, MaxRecordBytes + 10} {
		data := append(s.Export(testChain), make([]byte, n)...)
		res, err := Verify(bytes.NewReader(data), VerifyOptions{ExpectedHead: &rcs[1].HeadHash})
		if err != nil {
			t.Fatal(err)
		}
		f := res.First(CodeTornTail)
		if f == nil || !res.TornTail || res.Records != 2 || !bytes.Contains([]byte(f.Message), []byte("reserve")) {
			t.Errorf("%d zero bytes: %+v", n, res.Findings)
		}
	}
	res, _ := Verify(bytes.NewReader(append(s.Export(testChain), "{\"torn"...)), VerifyOptions{})
	if f := res.First(CodeTornTail); f == nil || bytes.Contains([]byte(f.Message), []byte("reserve")) {
		t.Errorf("a torn record is not the reserve: %+v", res.Findings)
	}
}
