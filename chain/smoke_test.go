package chain_test

import (
	"bytes"
	"testing"

	"polc.dev/polc/chain"
	"polc.dev/polc/internal/evidencegen"
)

func TestSmoke(t *testing.T) {
	snap, _ := evidencegen.Snapshot("p", "1.0.0", evidencegen.NewIDs("snap"))
	p := evidencegen.NewProducer("smoke", snap)
	p.Standard(true)
	p.Close()
	data := p.JSONL()
	t.Logf("%s", data[:600])
	res, err := chain.Verify(bytes.NewReader(data), chain.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		t.Log(f)
	}
	if !res.OK() {
		t.Fatal("not ok")
	}
	t.Logf("%+v", res.Gates)
}
