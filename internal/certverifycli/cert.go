package certverifycli

import (
	"context"
	"flag"

	"polc.dev/polc/certificate"
	"polc.dev/polc/chain"
)

// certParams are the arguments of `certverify cert CERT --chain LOG`.
type certParams struct {
	common
	cert         string
	chainLog     string
	snapshot     string
	trust        string
	expectedHead *chain.Hash
}

func (p *certParams) parse(args []string) (string, error) {
	fs := flag.NewFlagSet("cert", flag.ContinueOnError)
	p.register(fs)
	fs.StringVar(&p.chainLog, "chain", "", "the certificate's evidence chain (JSONL)")
	fs.StringVar(&p.snapshot, "snapshot", "", "policy snapshot file")
	fs.StringVar(&p.trust, "trust", "", "trust file")
	head := fs.String("expected-head", "", "64-hex chain_hash the last record must have")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return p.format, err
	}
	if err := p.check(); err != nil {
		return p.format, err
	}
	if len(pos) != 1 {
		return p.format, &usageError{"cert takes exactly one CERT argument"}
	}
	if p.chainLog == "" {
		return p.format, &usageError{"cert needs --chain LOG"}
	}
	p.cert = pos[0]
	p.expectedHead, err = parseHead(*head)
	return p.format, err
}

// runCert verifies a certificate (raw or DSSE) against its chain.
func runCert(ctx context.Context, p certParams) (*Report, error) {
	trust, err := loadTrust(p.trust)
	if err != nil {
		return nil, err
	}
	certBytes, err := readInput("certificate", p.cert, certificate.MaxCertificateBytes)
	if err != nil {
		return nil, err
	}
	var snap []byte
	if p.snapshot != "" {
		if snap, err = readInput("snapshot", p.snapshot, certificate.MaxSnapshotBytes); err != nil {
			return nil, err
		}
	}
	f, err := openLog(p.chainLog)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := certificate.Verify(certificate.VerifyInput{
		Certificate: certBytes, Chain: f, Snapshot: snap, Trust: trust,
		ExpectedHead: p.expectedHead, MaxFindings: p.maxFindings,
	})
	if err != nil {
		return nil, &inputError{err}
	}
	r := newReport("cert")
	r.Chain = summarize(v.Chain)
	r.addFindings(v.Findings)
	r.FindingsOmitted = v.Chain.Omitted
	r.Certificate = &CertificateSummary{Signed: v.Signed, Signers: v.Signers, Certificate: v.Certificate, checked: trust != nil}
	if r.Certificate.Signers == nil {
		r.Certificate.Signers = []string{}
	}
	if p.expectedHead != nil {
		r.Anchors = append(r.Anchors, chain.Anchor{Kind: "expected_head", Size: uint64(v.Chain.Records), Covers: v.Chain.HeadMatched, Verified: v.Chain.HeadMatched, Keys: []string{}})
	}
	if v.Signed {
		size := uint64(0)
		if v.Certificate != nil {
			size = uint64(v.Certificate.TreeSize) // Parse refuses a negative tree_size
		}
		r.Anchors = append(r.Anchors, chain.Anchor{Kind: "certificate", Size: size, Covers: v.Anchored, Verified: len(v.Signers) > 0 && v.Anchored, Keys: r.Certificate.Signers})
	}
	r.Stats.Records, r.Stats.Bytes = v.Chain.Records, v.Chain.Bytes
	return r, nil
}
